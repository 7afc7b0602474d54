"""Simulated annotators: they label through the HTTP API, answering from the true digit with noise; and how
a run under active sampling compares with the uniform one."""

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

BUSY_WAIT_S = 0.05


@dataclass
class LabellingTally:
    """What the simulated panel did."""

    answers: int = 0
    noisy_answers: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def label_until_finished(
    *,
    base_url: str,
    token: str,
    competition_id: int,
    true_class_of_image: dict[str, int],
    class_index_of_name: dict[str, int],
    noise: float,
    seed: int,
    tally: LabellingTally,
) -> None:
    """One annotator: take the next image, answer "does it contain ⟨class⟩?" truthfully except with
    probability `noise`, submit, until the competition has nothing left for them (or, under active
    sampling, nothing useful: its ranking is settled)."""
    rng = random.Random(seed)
    prefix = f"/api/v1/competitions/{competition_id}/labelling"
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while True:
            response = http.post(f"{prefix}/next")
            response.raise_for_status()
            body = response.json()
            if body["status"] in ("finished", "settled"):
                return
            if body["status"] == "busy":
                time.sleep(BUSY_WAIT_S)
                continue
            item = body["item"]
            true_class = true_class_of_image[item["image_url"].rsplit("/", 1)[-1]]
            answers, flipped = [], 0
            for question in item["questions"]:
                truth = class_index_of_name[question["class_name"]] == true_class
                noisy = rng.random() < noise
                flipped += noisy
                answers.append(
                    {"question_id": question["question_id"], "answer": truth != noisy, "seconds": 1.0}
                )
            http.post(f"{prefix}/answers", json={"answers": answers}).raise_for_status()
            with tally.lock:
                tally.answers += len(answers)
                tally.noisy_answers += flipped


def run_panel(
    *,
    base_url: str,
    tokens: list[str],
    competition_id: int,
    true_class_of_image: dict[str, int],
    class_index_of_name: dict[str, int],
    noise: float,
    seed: int,
) -> LabellingTally:
    """Every simulated annotator labelling at once, one thread each, until all questions are decided (or the
    ranking is settled, under active sampling)."""
    tally = LabellingTally()
    with ThreadPoolExecutor(len(tokens)) as pool:
        futures = [
            pool.submit(
                label_until_finished,
                base_url=base_url,
                token=token,
                competition_id=competition_id,
                true_class_of_image=true_class_of_image,
                class_index_of_name=class_index_of_name,
                noise=noise,
                seed=seed + index,
                tally=tally,
            )
            for index, token in enumerate(tokens)
        ]
        for future in futures:
            future.result()
    return tally


@dataclass(frozen=True)
class SimulatedRun:
    """A simulated competition's votes stored, SRCC with the true accuracy ranks, and active sampling's
    report (None under uniform sampling)."""

    votes: int
    srcc: float
    active: dict | None
    summary: str


def comparison(uniform: SimulatedRun, active: SimulatedRun) -> str:
    """Votes and SRCC of the active run beside the uniform run's."""
    report = active.active or {}
    share = active.votes / uniform.votes if uniform.votes else float("nan")
    return (
        f"Votes used: active {active.votes} ({share:.0%} of uniform's {uniform.votes}; ranking "
        f"{report.get('status', 'provisional')}) · SRCC active {active.srcc:.3f}, uniform {uniform.srcc:.3f}"
    )
