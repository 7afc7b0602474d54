"""`make demo`: an offline MAD competition on real images, through the service's normal paths.

1. The 1,797 UCI handwritten digits scikit-learn ships are written out as PNG files and imported.
2. Five timm architectures of growing capacity are trained briefly, each on its own small disjoint slice
   of the digits (larger slices for larger models), saved as weight files and registered with the
   competition (label set: the custom digit taxonomy in digits_taxonomy.yaml), each reporting its accuracy
   on the held-out digits, as a paper reports ImageNet validation accuracy.
3. A worker computes every prediction and every pair's selection.
4. Either the server starts for people to label (credentials printed) with a worker beside it, for the
   classifiers an admin adds, or, with --simulate, simulated annotators answer every question through the
   HTTP API and the leaderboard is printed beside each classifier's true accuracy on the held-out digits.
People label competition 'digits', whose panel is one annotator, so that one person's answers decide
questions and move the leaderboard (real competitions keep a panel of 5: a question is decided once 3 agree,
paper Sec. 3.1); --simulate labels 'digits-simulated' (the same digits and weights) with a panel of 5, and
--active then 'digits-simulated-active' the same way under active sampling, comparing votes and SRCC.
Everything lives in the data dir; running it again reuses what is there.
"""

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib.resources import files

import httpx
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers import service as classifiers_service
from app.classifiers.enums import ClassifierStatus
from app.classifiers.timm_source import load_weights_file
from app.competitions.models import Competition, Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.core.analysis import srcc
from app.db.engine import create_db_engine, create_sessionmaker
from app.demo.annotators import SimulatedRun, comparison, run_panel
from app.demo.corpus import DigitsCorpus, write_corpus
from app.demo.training import held_out_accuracy, save_weights, train_classifier
from app.images.service import ImageLimits, import_entries
from app.images.sources import Candidate
from app.images.store import ImageStore
from app.jobs.lifecycle import enqueue_classifier
from app.labelling.active_sampling.cost import active_cost
from app.labelling.active_sampling.policy_runner import ready
from app.leaderboard.agreement import competition_quality
from app.main import create_app
from app.migrate import upgrade
from app.serving import serve_in_thread
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role, User
from workers.worker import WorkerOptions, run_worker

COMPETITION = "digits"
SIMULATED_COMPETITION = "digits-simulated"
"""--simulate labels its own competition (same digits and weights) with the paper's panel of 5, so that the
simulated panel's agreement can be measured; the people's competition keeps its panel of one."""
SIMULATED_ACTIVE_COMPETITION = "digits-simulated-active"
"""--simulate --active labels this one (same digits and weights, panel of 5) under active sampling."""
SIMULATED_PANEL_SIZE = 5
DESCRIPTION = (
    "Five timm classifiers trained briefly on small slices of the UCI digits. Label it yourself: its panel"
    " is one annotator, so each of your answers decides its question and moves the leaderboard."
)
SIMULATED_DESCRIPTION = (
    "The same digits and classifiers, labelled by five simulated annotators (5 % noise) with the paper's"
    " panel of 5: a finished competition to read."
)
DEMO_CLASSIFIERS = (  # (timm architecture, share of the digits it trains on): capacity and data grow together
    ("lcnet_035", 0.011),
    ("mobilenetv3_small_050", 0.022),
    ("ghostnet_050", 0.045),
    ("resnet10t", 0.09),
    ("resnet18", 0.18),
)
DATA_CONFIG = {"input_size": (3, 16, 16), "crop_pct": 1.0, "interpolation": "bilinear"}
SPLIT_SEED = 0
PANEL = ("sim-1", "sim-2", "sim-3", "sim-4", "sim-5")
DEMO_PANEL_SIZE = 1
"""One annotator decides a question, so one person sees the leaderboard move as they label."""
NOISE = 0.05
WORKER_STOP_TIMEOUT_S = 60
"""How long stopping the demo waits for the worker to finish the job in hand (its lease expires anyway)."""
CREDENTIALS_FILE = "demo-credentials.json"

console = Console()


@dataclass(frozen=True)
class DemoOptions:
    """What to run: how many digits, how long to train, and whether to simulate the annotators."""

    simulate: bool = False
    active: bool = False
    images: int | None = None
    training_steps: int = 60
    host: str = "127.0.0.1"
    port: int = 8000


@contextmanager
def step(title: str) -> Iterator[None]:
    """Print a step's title, then its duration."""
    console.print(f"[bold]•[/] {title} …")
    started = time.monotonic()
    yield
    console.print(f"  done in {time.monotonic() - started:.1f} s")


def digits_taxonomy_text() -> str:
    """The custom taxonomy of the ten digits (shown in the README)."""
    return files("app.demo").joinpath("digits_taxonomy.yaml").read_text()


def ensure_competition(session: Session, simulate: bool, active: bool = False) -> Competition:
    """The digits competition, made on first run (k = 20 per pair, at most 4 images per predicted digit):
    people label 'digits' with a panel of one, simulated annotators 'digits-simulated' with a panel of 5
    (and 'digits-simulated-active' under active sampling)."""
    name, panel_size, description = (
        (SIMULATED_COMPETITION, SIMULATED_PANEL_SIZE, SIMULATED_DESCRIPTION)
        if simulate
        else (COMPETITION, DEMO_PANEL_SIZE, DESCRIPTION)
    )
    if active:
        name = SIMULATED_ACTIVE_COMPETITION
    competition = session.scalar(select(Competition).where(Competition.name == name))
    if competition is None:
        spec = CompetitionCreate(
            name=name,
            description=description,
            taxonomy="custom",
            taxonomy_source=digits_taxonomy_text(),
            k=20,
            confidence_threshold=0.8,
            max_per_label=4,
            panel_size=panel_size,
            sampling=Sampling.active if active else Sampling.uniform,
        )
        competition = create_competition(db_session=session, spec=spec)
    return competition


def import_corpus(
    session: Session, settings: Settings, competition: Competition, corpus: DigitsCorpus
) -> None:
    """Import the PNG files through the normal image import (duplicates are stored once)."""
    limits = ImageLimits(settings.max_image_bytes, settings.max_image_pixels, settings.thumbnail_size)
    entries = (Candidate(path.name, path.read_bytes()) for path in corpus.paths)
    with ThreadPoolExecutor(2) as executor:
        report = import_entries(
            db_session=session,
            store=ImageStore(settings.blob_store),
            competition=competition,
            entries=entries,
            limits=limits,
            executor=executor,
        )
    console.print(f"  {len(report.added)} added, {len(report.duplicates)} already there or duplicates")


def ensure_people(session: Session, settings: Settings) -> dict[str, str]:
    """An admin and an annotator with random passwords, kept in the data dir so re-runs print the same."""
    path = settings.data_dir / CREDENTIALS_FILE
    credentials = json.loads(path.read_text()) if path.exists() else {}
    for username, role in (("admin", Role.admin), ("annotator", Role.annotator)):
        if session.scalar(select(User.id).where(User.username == username)) is None:
            credentials[username] = secrets.token_urlsafe(9)
            users_service.create_user(
                db_session=session, username=username, role=role, password=credentials[username]
            )
    path.write_text(json.dumps(credentials, indent=2))
    return credentials


def training_split(corpus: DigitsCorpus) -> tuple[list[np.ndarray], np.ndarray]:
    """Each classifier's disjoint training slice and the held-out rest, by the same seed on every run."""
    sizes = [max(10, round(share * len(corpus.paths))) for _, share in DEMO_CLASSIFIERS]
    return corpus.training_slices(sizes, SPLIT_SEED)


def ensure_classifiers(
    session: Session, settings: Settings, competition: Competition, corpus: DigitsCorpus, options: DemoOptions
) -> None:
    """Train each architecture on its slice (weights cached in the data dir) and register it like an admin,
    with a line per model as it starts and ends (a bar of its steps in a terminal)."""
    slices, held_out = training_split(corpus)
    registered = {
        c.name
        for c in classifiers_service.list_classifiers(db_session=session, competition_id=competition.id)
    }
    for seed, ((architecture, _share), indices) in enumerate(zip(DEMO_CLASSIFIERS, slices, strict=True)):
        if architecture in registered:
            continue
        weights = settings.data_dir / "demo-weights" / f"{architecture}.safetensors"
        if not weights.exists():
            model_number = f"{seed + 1} of {len(DEMO_CLASSIFIERS)}"
            console.print(f"  training {architecture} ({model_number}) on {len(indices)} digits …")
            started = time.monotonic()
            with training_progress() as progress:
                steps = progress.add_task(architecture, total=options.training_steps)
                model = train_classifier(
                    architecture,
                    [corpus.paths[i] for i in indices],
                    corpus.digits[indices],
                    DATA_CONFIG,
                    steps=options.training_steps,
                    seed=seed,
                    on_step=partial(progress.advance, steps),
                )
            save_weights(model, weights)
            console.print(
                f"  trained {architecture} on {len(indices)} digits in {time.monotonic() - started:.1f} s"
            )
        trained = load_weights_file(architecture, weights, 10, DATA_CONFIG)
        accuracy = held_out_accuracy(trained, [corpus.paths[i] for i in held_out], corpus.digits[held_out])
        classifier = classifiers_service.register_timm_weights(
            db_session=session,
            settings=settings,
            competition=competition,
            name=architecture,
            architecture=architecture,
            weights_file=weights,
            weights_filename=weights.name,
            data_config=DATA_CONFIG,
            reported_accuracy=round(100 * accuracy, 2),
        )
        enqueue_classifier(db_session=session, settings=settings, classifier=classifier)


def training_progress() -> Progress:
    """A bar of one model's training steps, gone when it ends (shown only in a terminal)."""
    columns = (TextColumn("    {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True, disable=not console.is_terminal)


def true_accuracies(
    session: Session, settings: Settings, competition: Competition, corpus: DigitsCorpus
) -> dict[str, float]:
    """Each classifier's top-1 accuracy on the digits no classifier was trained on."""
    _slices, held_out = training_split(corpus)
    ordinal_of = classifiers_service.ordinal_by_sha256(db_session=session, competition_id=competition.id)
    n_images = len(ordinal_of)
    held_out_ordinals, held_out_digits = [], []
    for index in held_out:
        sha256 = hashlib.sha256(corpus.paths[index].read_bytes()).hexdigest()
        held_out_ordinals.append(ordinal_of[sha256])
        held_out_digits.append(corpus.digits[index])
    accuracies = {}
    for classifier in classifiers_service.list_classifiers(db_session=session, competition_id=competition.id):
        predictions = classifiers_service.read_predictions(
            settings=settings, classifier=classifier, n_images=n_images
        )
        accuracies[classifier.name] = float(
            np.mean(predictions.top1[held_out_ordinals] == np.asarray(held_out_digits))
        )
    return accuracies


def compute_predictions_and_selections(settings: Settings) -> int:
    """Run a worker on this machine's database until every prediction and selection job is done."""
    sessions = _sessions(settings)
    with sessions() as session:
        token = users_service.local_worker_token(db_session=session)
        session.commit()
    with serve_in_thread(create_app(settings)) as url:
        return run_worker(
            url=url,
            token=token,
            options=WorkerOptions(device="cpu", cache_dir=settings.data_dir / "worker-cache"),
            exit_when_idle=True,
            report=lambda label, done, total: None,
            name="demo-worker",
        )


def _sessions(settings: Settings):
    """A sessionmaker on the demo's database."""
    return create_sessionmaker(create_db_engine(settings.sqlalchemy_url))


def simulate_labelling(settings: Settings, competition: Competition, corpus: DigitsCorpus) -> dict:
    """Five simulated annotators answer every question the queue gives them through the HTTP API (true
    digit, 5% noise); returns the leaderboard the API then serves."""
    sessions = _sessions(settings)
    with sessions() as session:
        tokens = []
        for username in PANEL:
            user = session.scalar(select(User).where(User.username == username))
            if user is None:
                user = users_service.create_user(
                    db_session=session,
                    username=username,
                    role=Role.annotator,
                    password=secrets.token_urlsafe(12),
                )
            tokens.append(users_service.create_api_token(db_session=session, user=user, name="demo"))
        session.commit()
    true_class = {
        hashlib.sha256(path.read_bytes()).hexdigest(): int(digit)
        for path, digit in zip(corpus.paths, corpus.digits, strict=True)
    }
    class_index_of_name = {name: index for index, name in enumerate(competition.class_names)}
    app = create_app(settings)
    if competition.sampling == Sampling.active:
        # The simulated panel answers a hundred times faster than people: the policy's process, which a
        # server starts at its first answer under active sampling, is started first so that its second or
        # two of start-up does not fall inside the labelling (app.labelling.active_sampling.policy_runner).
        app.state.policy_runner.start().submit(ready).result()
    with serve_in_thread(app) as url:
        tally = run_panel(
            base_url=url,
            tokens=tokens,
            competition_id=competition.id,
            true_class_of_image=true_class,
            class_index_of_name=class_index_of_name,
            noise=NOISE,
            seed=SPLIT_SEED,
        )
        console.print(f"  {tally.answers} answers, {tally.noisy_answers} of them flipped by noise")
        response = httpx.get(f"{url}/api/v1/competitions/{competition.id}/leaderboard", timeout=120)
        response.raise_for_status()
        return response.json()


def print_leaderboard(competition_name: str, leaderboard: dict, accuracies: dict[str, float]) -> float:
    """The MAD leaderboard beside each classifier's true held-out accuracy (one without labelled images
    has no rank: last, with dashes); returns SRCC of the two ranks over the ranked classifiers."""
    rows = sorted(leaderboard["classifiers"], key=lambda row: (row["mad_rank"] is None, row["mad_rank"] or 0))
    true_rank = {
        name: rank
        for rank, name in enumerate(sorted(accuracies, key=accuracies.__getitem__, reverse=True), 1)
    }
    table = Table(title=f"MAD leaderboard of the competition {competition_name!r}")
    for column in ("MAD rank", "classifier", "score", "interval", "true acc.", "true rank"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        ranked = row["mad_rank"] is not None
        table.add_row(
            str(row["mad_rank"]) if ranked else "—",
            row["name"],
            f"{row['mad_score']:.3f}" if ranked else "—",
            f"{row['rank_low']}–{row['rank_high']}" if ranked else "—",
            f"{accuracies[row['name']]:.1%}",
            str(true_rank[row["name"]]),
        )
    console.print(table)
    ranked_rows = [row for row in rows if row["mad_rank"] is not None]
    return srcc([row["mad_rank"] for row in ranked_rows], [true_rank[row["name"]] for row in ranked_rows])


@dataclass(frozen=True)
class PreparedDemo:
    """The digits competition ready to label, its corpus, its people, and when setting up began."""

    competition: Competition
    corpus: DigitsCorpus
    credentials: dict[str, str]
    started: float


def prepare_demo(settings: Settings, options: DemoOptions, active: bool = False) -> PreparedDemo:
    """Set up (or reuse) the digits competition end to end: digits, classifiers, predictions, selections
    (`active`: the simulated competition under active sampling)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with step("Migrating the database"):
        upgrade(settings.sqlalchemy_url)
    with step("Writing the UCI handwritten digits as PNG files"):
        corpus = write_corpus(settings.data_dir / "digits" / "png", limit=options.images)
    sessions = _sessions(settings)
    with sessions() as session:
        competition = ensure_competition(session, options.simulate, active)
        with step(f"Importing {len(corpus.paths)} digits into competition '{competition.name}'"):
            import_corpus(session, settings, competition, corpus)
            credentials = ensure_people(session, settings)
            session.commit()
        with step(f"Training and registering {len(DEMO_CLASSIFIERS)} timm classifiers"):
            ensure_classifiers(session, settings, competition, corpus, options)
            session.commit()
    with step("Computing predictions and pair selections with a worker"):
        console.print(f"  {compute_predictions_and_selections(settings)} jobs run")
    with sessions() as session:
        failed = [
            c
            for c in classifiers_service.list_classifiers(db_session=session, competition_id=competition.id)
            if c.status != ClassifierStatus.ready
        ]
    if failed:
        raise SystemExit(
            "classifiers not ready: "
            + "; ".join(f"{c.name}: {c.status.value} {c.error or ''}" for c in failed)
        )
    return PreparedDemo(competition, corpus, credentials, started)


def print_how_to_label(prepared: PreparedDemo, url: str) -> None:
    """Where to go, as whom, and what moves: the demo's first screen for a newcomer."""
    competition = prepared.competition
    console.print(f"Ready in {time.monotonic() - prepared.started:.0f} s: open [bold]{url}[/].")
    console.print(
        f"Sign in as [bold]annotator[/] and label at [bold]{url}/competitions/{competition.id}/label[/]."
    )
    if competition.panel_size == 1:
        console.print(
            "The demo's panel is 1 annotator (real competitions keep 5), so each of your answers decides its"
            f" question: {url}/competitions/{competition.id}/leaderboard moves with your first images."
        )
    else:
        console.print(
            f"This competition's panel is {competition.panel_size}: a question is decided once "
            f"{competition.panel_size // 2 + 1} annotators agree, so the leaderboard waits for others too."
        )
    for username, password in prepared.credentials.items():
        console.print(f"  {username:10s} password: {password}", highlight=False)
    console.print("A worker runs beside the server for classifiers added at /admin. Ctrl-C stops both.")


def serve_with_worker(settings: Settings, prepared: PreparedDemo, options: DemoOptions) -> None:
    """Serve the demo with a worker beside it (a thread running the real worker over HTTP) until Ctrl-C,
    then stop the worker and the server."""
    with _sessions(settings)() as session:
        token = users_service.local_worker_token(db_session=session)
        session.commit()
    stop = threading.Event()
    with serve_in_thread(create_app(settings), host=options.host, port=options.port) as url:
        worker = threading.Thread(
            target=run_worker,
            kwargs={
                "url": url,
                "token": token,
                "options": WorkerOptions(device="cpu", cache_dir=settings.data_dir / "worker-cache"),
                "exit_when_idle": False,
                "report": lambda label, done, total: None,
                "name": "demo-worker",
                "stop": stop,
            },
            name="demo-worker",
            daemon=True,
        )
        worker.start()
        print_how_to_label(prepared, url)
        try:
            while worker.is_alive():
                worker.join(timeout=1)
            console.print("The worker stopped; the server goes on without it.")
            threading.Event().wait()
        except KeyboardInterrupt:
            console.print("Stopping the worker and the server …")
        finally:
            stop.set()
            worker.join(timeout=WORKER_STOP_TIMEOUT_S)


def run_demo(settings: Settings, options: DemoOptions) -> None:
    """Set up (or reuse) the digits competition end to end, then serve it or simulate its labelling (and,
    with --active, that of its twin under active sampling, compared)."""
    prepared = prepare_demo(settings, options)
    if not options.simulate:
        serve_with_worker(settings, prepared, options)
        return
    runs = [simulate_and_print(settings, prepared, "Simulated annotators labelling every question")]
    if options.active:
        twin = prepare_demo(settings, options, active=True)
        runs.append(simulate_and_print(settings, twin, "The same under active sampling"))
    console.print(f"Total {time.monotonic() - prepared.started:.0f} s.")
    for run in runs:
        console.print(run.summary)
    if options.active:
        console.print(comparison(*runs))


def simulate_and_print(settings: Settings, prepared: PreparedDemo, title: str) -> SimulatedRun:
    """Label the prepared competition with the simulated panel through the HTTP API and print its
    leaderboard; the run, with a line of its SRCC and the panel's agreement."""
    competition, corpus = prepared.competition, prepared.corpus
    with step(f"{title} through the HTTP API"):
        leaderboard = simulate_labelling(settings, competition, corpus)
    with _sessions(settings)() as session:
        accuracies = true_accuracies(session, settings, session.merge(competition), corpus)
        alpha = competition_quality(db_session=session, competition=session.merge(competition)).alpha
        votes = active_cost(session, competition.id, competition.panel_size).votes_used
    correlation = print_leaderboard(competition.name, leaderboard, accuracies)
    agreement = "undefined" if alpha is None else f"{alpha:.3f}"
    summary = f"SRCC(MAD rank, true accuracy rank) = {correlation:.3f} · agreement α = {agreement}"
    return SimulatedRun(votes, correlation, leaderboard.get("active"), summary)
