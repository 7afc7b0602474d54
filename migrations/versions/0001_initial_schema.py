"""Initial schema: users, sign-in failures, competitions, images, classifiers, jobs, subsets, questions, votes

Until the first release this one migration is amended in place; after it, changes get new revisions.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create every table of the schema."""
    op.create_table(
        "competitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("guidelines", sa.Text(), nullable=False),
        sa.Column("taxonomy", sa.String(length=64), nullable=False),
        sa.Column("taxonomy_source", sa.Text(), nullable=True),
        sa.Column("class_keys", sa.JSON(), nullable=False),
        sa.Column("class_names", sa.JSON(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("confidence_threshold", sa.Double(), nullable=False),
        sa.Column("max_per_label", sa.Integer(), nullable=False),
        sa.Column("panel_size", sa.Integer(), nullable=False),
        sa.Column("smoothing", sa.Double(), nullable=False),
        sa.Column("gold_rate", sa.Double(), nullable=False),
        sa.Column("gold_threshold", sa.Double(), nullable=False),
        sa.Column("gold_min_answers", sa.Integer(), nullable=False),
        sa.Column("members_only", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "confidence_threshold >= 0 AND confidence_threshold <= 1",
            name=op.f("ck_competitions_threshold_unit"),
        ),
        sa.CheckConstraint("gold_rate >= 0 AND gold_rate < 1", name=op.f("ck_competitions_gold_rate_unit")),
        sa.CheckConstraint(
            "gold_threshold >= 0 AND gold_threshold <= 1", name=op.f("ck_competitions_gold_threshold_unit")
        ),
        sa.CheckConstraint("gold_min_answers >= 1", name=op.f("ck_competitions_gold_min_answers_positive")),
        sa.CheckConstraint("k >= 1", name=op.f("ck_competitions_k_positive")),
        sa.CheckConstraint("max_per_label >= 1", name=op.f("ck_competitions_max_per_label_positive")),
        sa.CheckConstraint("panel_size >= 1 AND panel_size % 2 = 1", name=op.f("ck_competitions_panel_odd")),
        sa.CheckConstraint(
            "smoothing >= 0.001 AND smoothing <= 1000.0", name=op.f("ck_competitions_smoothing_in_range")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_competitions")),
        sa.UniqueConstraint("name", name=op.f("uq_competitions_name")),
    )
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("format", sa.String(length=8), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("original_name", sa.String(length=255), nullable=False),
        sa.Column("source_uri", sa.String(length=2048), nullable=True),
        sa.Column("source_url", sa.String(length=2048), nullable=True),
        sa.Column("license", sa.String(length=255), nullable=True),
        sa.Column("author", sa.String(length=255), nullable=True),
        sa.Column("phash", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_images")),
        sa.UniqueConstraint("sha256", name=op.f("uq_images_sha256")),
    )
    op.create_index("ix_images_source_uri", "images", ["source_uri"])
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column(
            "role",
            sa.Enum("admin", "annotator", "worker", name="role", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("password_hash", sa.String(length=255), nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("votes_excluded", sa.Boolean(), nullable=False),
        sa.Column("session_generation", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "invitations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "role",
            sa.Enum("admin", "annotator", "worker", name="role", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("note", sa.String(length=200), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by"], ["users.id"], name=op.f("fk_invitations_created_by_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_invitations_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invitations")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_invitations_token_hash")),
    )
    op.create_table(
        "competition_members",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_competition_members_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_competition_members_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("competition_id", "user_id", name=op.f("pk_competition_members")),
    )
    op.create_index("ix_competition_members_user_id", "competition_members", ["user_id"])
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
    )
    op.create_index("ix_login_failures_address_failed_at", "login_failures", ["address", "failed_at"])
    op.create_index("ix_login_failures_failed_at", "login_failures", ["failed_at"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.create_table(
        "classifiers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column(
            "source",
            sa.Enum(
                "timm-weights",
                "timm-pretrained",
                "predictions-file",
                name="classifiersource",
                native_enum=False,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("architecture", sa.String(length=200), nullable=True),
        sa.Column("pretrained_tag", sa.String(length=200), nullable=True),
        sa.Column("weights_sha256", sa.String(length=64), nullable=True),
        sa.Column("weights_format", sa.String(length=16), nullable=True),
        sa.Column("data_config", sa.JSON(), nullable=True),
        sa.Column("reported_accuracy", sa.Double(), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "predicting",
                "ready",
                "failed",
                "retired",
                name="classifierstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_classifiers_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_classifiers")),
        sa.UniqueConstraint("competition_id", "name", name=op.f("uq_classifiers_competition_id_name")),
    )
    op.create_index("ix_classifiers_competition_id", "classifiers", ["competition_id"])
    op.create_table(
        "competition_images",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("excluded", sa.Boolean(), nullable=False),
        sa.Column("excluded_reason", sa.String(length=255), nullable=True),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_competition_images_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_competition_images_image_id_images"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("competition_id", "image_id", name=op.f("pk_competition_images")),
        sa.UniqueConstraint(
            "competition_id", "ordinal", name=op.f("uq_competition_images_competition_id_ordinal")
        ),
    )
    op.create_index("ix_competition_images_image_id", "competition_images", ["image_id"])
    op.create_index(
        "ix_competition_images_excluded",
        "competition_images",
        ["competition_id"],
        postgresql_where=sa.text("excluded"),
        sqlite_where=sa.text("excluded"),
    )
    op.create_table(
        "difficulty_flags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "reason",
            sa.Enum("too_difficult", "not_natural", name="flagreason", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_difficulty_flags_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_difficulty_flags_image_id_images"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_difficulty_flags_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_difficulty_flags")),
        sa.UniqueConstraint(
            "competition_id",
            "image_id",
            "user_id",
            name=op.f("uq_difficulty_flags_competition_id_image_id_user_id"),
        ),
    )
    op.create_index("ix_difficulty_flags_image_id", "difficulty_flags", ["image_id"])
    op.create_index("ix_difficulty_flags_user_id", "difficulty_flags", ["user_id"])
    op.create_table(
        "quality_flags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum("gold", "fast", "run", name="qualityflagkind", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "decision",
            sa.Enum("resumed", "excluded", name="qualitydecision", native_enum=False, length=16),
            nullable=True,
        ),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_quality_flags_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_quality_flags_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quality_flags")),
    )
    op.create_index("ix_quality_flags_competition_user", "quality_flags", ["competition_id", "user_id"])
    op.create_index("ix_quality_flags_user_id", "quality_flags", ["user_id"])
    op.create_table(
        "questions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("class_index", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Boolean(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gold_answer", sa.Boolean(), nullable=True),
        sa.Column("yes_votes", sa.Integer(), nullable=False),
        sa.Column("no_votes", sa.Integer(), nullable=False),
        sa.Column("adjudicated", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_questions_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_questions_image_id_images"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_questions")),
        sa.UniqueConstraint(
            "competition_id",
            "image_id",
            "class_index",
            name=op.f("uq_questions_competition_id_image_id_class_index"),
        ),
    )
    op.create_index("ix_questions_image_id", "questions", ["image_id"])
    op.create_index("ix_questions_open", "questions", ["competition_id", "outcome"])
    op.create_index("ix_questions_gold", "questions", ["competition_id", "gold_answer"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column(
            "kind", sa.Enum("predict", "select", name="jobkind", native_enum=False, length=16), nullable=False
        ),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("classifier_id", sa.Integer(), nullable=False),
        sa.Column("other_classifier_id", sa.Integer(), nullable=True),
        sa.Column("shard_start", sa.Integer(), nullable=True),
        sa.Column("shard_end", sa.Integer(), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "queued",
                "running",
                "done",
                "failed",
                "cancelled",
                name="jobstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["classifier_id"],
            ["classifiers.id"],
            name=op.f("fk_jobs_classifier_id_classifiers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_jobs_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["other_classifier_id"],
            ["classifiers.id"],
            name=op.f("fk_jobs_other_classifier_id_classifiers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("key", name=op.f("uq_jobs_key")),
    )
    op.create_index("ix_jobs_classifier_id", "jobs", ["classifier_id"])
    op.create_index("ix_jobs_competition_id", "jobs", ["competition_id"])
    op.create_index("ix_jobs_status_lease", "jobs", ["status", "lease_expires_at"])
    op.create_table(
        "worker_sightings",
        sa.Column("worker", sa.String(length=200), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("worker", name=op.f("pk_worker_sightings")),
    )
    op.create_table(
        "pair_subsets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("classifier_a_id", sa.Integer(), nullable=False),
        sa.Column("classifier_b_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["classifier_a_id"],
            ["classifiers.id"],
            name=op.f("fk_pair_subsets_classifier_a_id_classifiers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["classifier_b_id"],
            ["classifiers.id"],
            name=op.f("fk_pair_subsets_classifier_b_id_classifiers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_pair_subsets_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pair_subsets")),
        sa.UniqueConstraint(
            "classifier_a_id", "classifier_b_id", name=op.f("uq_pair_subsets_classifier_a_id_classifier_b_id")
        ),
    )
    op.create_index("ix_pair_subsets_classifier_b_id", "pair_subsets", ["classifier_b_id"])
    op.create_index("ix_pair_subsets_competition_id", "pair_subsets", ["competition_id"])
    op.create_table(
        "votes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("answer", sa.Boolean(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_votes_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["question_id"], ["questions.id"], name=op.f("fk_votes_question_id_questions"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_votes_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_votes")),
        sa.UniqueConstraint("question_id", "user_id", name=op.f("uq_votes_question_id_user_id")),
    )
    op.create_index("ix_votes_user_competition_created", "votes", ["user_id", "competition_id", "created_at"])
    op.create_table(
        "gold_answers",
        sa.Column("question_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("answer", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_gold_answers_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_gold_answers_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("question_id", "user_id", name=op.f("pk_gold_answers")),
    )
    op.create_index("ix_gold_answers_user_id", "gold_answers", ["user_id"])
    op.create_table(
        "pair_images",
        sa.Column("subset_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column(
            "role",
            sa.Enum("selected", "reserve", "discarded", name="pairimagerole", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("distance", sa.Double(), nullable=False),
        sa.Column("label_a", sa.Integer(), nullable=False),
        sa.Column("label_b", sa.Integer(), nullable=False),
        sa.Column("prob_a", sa.Double(), nullable=False),
        sa.Column("prob_b", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_pair_images_image_id_images"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["subset_id"],
            ["pair_subsets.id"],
            name=op.f("fk_pair_images_subset_id_pair_subsets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("subset_id", "position", name=op.f("pk_pair_images")),
    )
    op.create_index("ix_pair_images_image_id", "pair_images", ["image_id"])
    op.create_table(
        "label_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("needed", sa.Integer(), nullable=False),
        sa.Column("spread", sa.Integer(), nullable=False),
        sa.Column("shuffle", sa.Integer(), nullable=False),
        sa.Column("flags", sa.Integer(), nullable=False),
        sa.Column("discarded", sa.Boolean(), nullable=False),
        sa.Column("kept", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_label_items_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_label_items_image_id_images"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_label_items")),
        sa.UniqueConstraint(
            "competition_id", "image_id", name=op.f("uq_label_items_competition_id_image_id")
        ),
    )
    op.create_index("ix_label_items_image_id", "label_items", ["image_id"])
    op.create_index("ix_label_items_queue", "label_items", ["competition_id", "needed", "spread", "shuffle"])
    op.create_table(
        "label_assignments",
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "leased", "done", "flagged", "skipped", name="assignmentstatus", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column("leased_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["label_items.id"],
            name=op.f("fk_label_assignments_item_id_label_items"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_label_assignments_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("item_id", "user_id", name=op.f("pk_label_assignments")),
    )
    op.create_index("ix_label_assignments_user_status", "label_assignments", ["user_id", "status"])
    op.create_table(
        "label_undo_depths",
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_label_undo_depths_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_label_undo_depths_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("competition_id", "user_id", name=op.f("pk_label_undo_depths")),
    )
    op.create_table(
        "leaderboard_snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(length=80), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("leaderboard", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_leaderboard_snapshots_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leaderboard_snapshots")),
        sa.UniqueConstraint("slug", name=op.f("uq_leaderboard_snapshots_slug")),
    )
    op.create_index("ix_leaderboard_snapshots_competition_id", "leaderboard_snapshots", ["competition_id"])
    op.create_table(
        "adjudications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("competition_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.Integer(), nullable=True),
        sa.Column(
            "kind",
            sa.Enum(
                "split", "discarded", "not_natural", name="adjudicationkind", native_enum=False, length=16
            ),
            nullable=False,
        ),
        sa.Column(
            "verdict",
            sa.Enum("confirmed", "overturned", name="verdict", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("panel_outcome", sa.Boolean(), nullable=True),
        sa.Column("outcome", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["competition_id"],
            ["competitions.id"],
            name=op.f("fk_adjudications_competition_id_competitions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_adjudications_image_id_images"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["question_id"],
            ["questions.id"],
            name=op.f("fk_adjudications_question_id_questions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adjudications")),
    )
    op.create_index("ix_adjudications_competition_id", "adjudications", ["competition_id"])
    op.create_table(
        "competition_versions",
        sa.Column("competition_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("writer", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("competition_id", "writer", name=op.f("pk_competition_versions")),
    )
    for table, (events, competition_id) in VERSIONED_TABLES.items():
        for statement in _version_trigger(op.get_bind().dialect.name, table, events, competition_id):
            op.execute(statement)


VERSIONED_TABLES = {
    "competitions": (("UPDATE",), "{row}.id"),
    "classifiers": (("INSERT", "UPDATE", "DELETE"), "{row}.competition_id"),
    "pair_subsets": (("INSERT", "UPDATE", "DELETE"), "{row}.competition_id"),
    "pair_images": (
        ("INSERT", "UPDATE", "DELETE"),
        "(SELECT competition_id FROM pair_subsets WHERE id = {row}.subset_id)",
    ),
    "questions": (("INSERT", "UPDATE OF outcome, yes_votes, no_votes", "DELETE"), "{row}.competition_id"),
}
"""The rows public reads come from, the changes that bump their competition's data version, and how to
find the competition of a row (app/competitions/models.py: CompetitionVersion)."""


def _version_trigger(dialect: str, table: str, events: tuple[str, ...], competition_id: str) -> list[str]:
    """The statements that make a change of `table` add 1 to its competition's version row of this writer
    (the Postgres backend; 0 on SQLite, which has one writer at a time)."""
    if dialect == "postgresql":
        return [
            statement
            for event in events
            for statement in (
                _row_trigger(table, event, competition_id)
                if " OF " in event
                else _statement_trigger(table, event, competition_id)
            )
        ]
    bump = (
        "INSERT INTO competition_versions (competition_id, writer, version) SELECT {id}, 0, 1 "
        "WHERE {id} IS NOT NULL ON CONFLICT (competition_id, writer) "
        "DO UPDATE SET version = competition_versions.version + 1;"
    )
    return [
        f"CREATE TRIGGER bump_version_{table}_{event.split()[0].lower()} AFTER {event} ON {table} BEGIN "
        + bump.format(id=competition_id.format(row="OLD" if event == "DELETE" else "NEW"))
        + " END"
        for event in events
    ]


def _trigger_function(table: str, event: str) -> str:
    """The name of the Postgres function (and trigger) that bumps versions for this table and event."""
    return f"bump_version_{table}_{event.split()[0].lower()}"


def _statement_trigger(table: str, event: str, competition_id: str) -> list[str]:
    """Postgres: once per statement, 1 added for each competition its rows belong to (read from the
    statement's transition table): a bulk insert of 100,000 questions bumps once, not 100,000 times."""
    name = _trigger_function(table, event)
    changed_id = competition_id.format(row="changed_rows")
    rows = "OLD" if event == "DELETE" else "NEW"
    return [
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO competition_versions (competition_id, writer, version) "
        f"SELECT changed_id, pg_backend_pid(), 1 FROM (SELECT DISTINCT {changed_id} AS changed_id "
        "FROM changed_rows) AS changed WHERE changed_id IS NOT NULL "
        "ON CONFLICT (competition_id, writer) DO UPDATE SET version = competition_versions.version + 1; "
        "RETURN NULL; END $$",
        f"CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING {rows} TABLE AS changed_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()",
    ]


def _row_trigger(table: str, event: str, competition_id: str) -> list[str]:
    """Postgres: once per row, for an UPDATE OF columns (a vote's counts; Postgres gives such triggers no
    transition table). The row is updated first and inserted only when missing: an INSERT … ON CONFLICT
    for every vote cost twice as much."""
    name = _trigger_function(table, event)
    changed_id = competition_id.format(row="NEW")
    return [
        f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "UPDATE competition_versions SET version = version + 1 "
        f"WHERE competition_id = {changed_id} AND writer = pg_backend_pid(); "
        "IF NOT FOUND THEN INSERT INTO competition_versions (competition_id, writer, version) "
        f"SELECT {changed_id}, pg_backend_pid(), 1 WHERE {changed_id} IS NOT NULL "
        "ON CONFLICT (competition_id, writer) DO UPDATE SET version = competition_versions.version + 1; "
        "END IF; RETURN NULL; END $$",
        f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()",
    ]


def downgrade() -> None:
    """Drop every table, dependants first (their indexes go with them)."""
    op.drop_table("adjudications")
    if op.get_bind().dialect.name == "postgresql":
        for table, (events, _competition_id) in VERSIONED_TABLES.items():
            for event in events:
                op.execute(f"DROP FUNCTION {_trigger_function(table, event)}() CASCADE")
    op.drop_table("competition_versions")
    op.drop_table("leaderboard_snapshots")
    op.drop_table("label_undo_depths")
    op.drop_table("label_assignments")
    op.drop_table("label_items")
    op.drop_table("pair_images")
    op.drop_table("gold_answers")
    op.drop_table("votes")
    op.drop_table("pair_subsets")
    op.drop_table("worker_sightings")
    op.drop_table("jobs")
    op.drop_table("questions")
    op.drop_table("quality_flags")
    op.drop_table("difficulty_flags")
    op.drop_table("competition_images")
    op.drop_table("classifiers")
    op.drop_table("api_tokens")
    op.drop_table("login_failures")
    op.drop_table("competition_members")
    op.drop_table("invitations")
    op.drop_table("users")
    op.drop_table("images")
    op.drop_table("competitions")
