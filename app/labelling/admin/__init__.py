"""The admins' labelling API (admin_router): a web edge over quality_control and active_sampling; the
services it calls live in their job's sub-package."""
