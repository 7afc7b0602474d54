"""The worker's HTTP client for the service: the job protocol and the files a job needs.

Workers need only the service URL and a worker token, so they can run on any machine.
"""

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.classifiers.prediction_store import Predictions
from app.core.selection import PairDiagnosis, PairSelection
from app.jobs.schemas import (
    ClaimRequest,
    ClaimResponse,
    FailureReport,
    HeartbeatRequest,
    Lease,
    LeaseState,
    SelectionDiagnosis,
    SelectionResult,
)
from app.storage.local import write_atomically

TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class LeaseLost(RuntimeError):
    """The service gave the job to another worker; stop working on it and do not report it."""


class ServiceError(RuntimeError):
    """The service refused a request; the message is the service's explanation."""


class ServiceUnavailable(ServiceError):
    """The service cannot answer now (502/503/504: restarting, database connection lost, disk full)."""


def _raise_for_status(response: httpx.Response) -> httpx.Response:
    """The response when it succeeded, else the error raise_for_error gives."""
    if not response.is_success:
        raise_for_error(
            response.status_code, f"{response.request.method} {response.request.url.path}", response.content
        )
    return response


def raise_for_error(status: int, request: str, body: bytes) -> None:
    """LeaseLost on 409, ServiceUnavailable on 502/503/504, else ServiceError with the service's detail."""
    try:
        detail = json.loads(body).get("detail", body.decode(errors="replace"))
    except (ValueError, AttributeError):
        detail = body.decode(errors="replace")
    if status == 409:
        raise LeaseLost(str(detail))
    if status in (502, 503, 504):
        raise ServiceUnavailable(f"{request}: {status} {detail}")
    raise ServiceError(f"{request}: {status} {detail}")


class ServiceClient:
    """Talks to one MAD Arena service as one worker account."""

    def __init__(self, base_url: str, token: str):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
        )

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def _post(self, path: str, **kwargs: Any) -> Any:
        """POST and return the decoded JSON body."""
        return _raise_for_status(self.http.post(path, **kwargs)).json()

    def claim(self, worker: str) -> ClaimResponse:
        """Lease the next jobs (none when there is no work now)."""
        body = ClaimRequest(worker=worker).model_dump()
        return ClaimResponse.model_validate(self._post("/api/v1/jobs/claim", json=body))

    def heartbeat(self, leases: list[tuple[int, str, int]]) -> dict[int, bool]:
        """Extend (job id, lease token, progress) leases; returns which are still held."""
        body = HeartbeatRequest(
            leases=[Lease(job_id=j, lease_token=t, progress_done=p) for j, t, p in leases]
        ).model_dump()
        states = [
            LeaseState.model_validate(state) for state in self._post("/api/v1/jobs/heartbeat", json=body)
        ]
        return {state.job_id: state.held for state in states}

    def complete_predict(self, job_id: int, lease_token: str, predictions: Predictions) -> None:
        """Upload a shard's arrays, finishing the predict job."""
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **predictions.arrays())
        self._post(
            f"/api/v1/jobs/{job_id}/predictions",
            data={"lease_token": lease_token},
            files={"predictions": ("shard.npz", buffer.getvalue(), "application/octet-stream")},
        )

    def complete_select(
        self, job_id: int, lease_token: str, selection: PairSelection, diagnosis: PairDiagnosis
    ) -> None:
        """Upload a pair's selection, reserve and diagnosis, finishing the select job."""
        body = SelectionResult(
            lease_token=lease_token,
            n_selected=selection.n_selected,
            diagnosis=SelectionDiagnosis.model_validate(diagnosis.as_dict()),
            ordinals=selection.ordinals.tolist(),
            distances=selection.distances.tolist(),
            labels_a=selection.labels_i.tolist(),
            labels_b=selection.labels_j.tolist(),
            probs_a=selection.probs_i.tolist(),
            probs_b=selection.probs_j.tolist(),
            below_threshold=(~selection.passed).tolist(),
        )
        self._post(f"/api/v1/jobs/{job_id}/selection", json=body.model_dump())

    def fail(self, job_id: int, lease_token: str, error: str, permanent: bool) -> None:
        """Report a failed job (requeued unless permanent or out of attempts)."""
        body = FailureReport(lease_token=lease_token, error=error[:10_000], permanent=permanent)
        self._post(f"/api/v1/jobs/{job_id}/fail", json=body.model_dump())

    def weights_file(self, classifier_id: int, sha256: str, weights_format: str, cache_dir: Path) -> Path:
        """A classifier's weights, downloaded once into the cache and checked against their SHA-256."""
        path = cache_dir / "weights" / f"{sha256}.{weights_format}"
        if path.exists():
            return path
        data = _raise_for_status(self.http.get(f"/api/v1/classifiers/{classifier_id}/weights")).content
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ServiceError(f"weights of classifier {classifier_id} do not match their SHA-256")
        write_atomically(path, data)
        return path

    def predictions(self, classifier_id: int, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Some of a classifier's prediction arrays over every ordinal of its competition."""
        response = self.http.get(
            f"/api/v1/classifiers/{classifier_id}/predictions", params={"fields": fields}
        )
        with np.load(io.BytesIO(_raise_for_status(response).content), allow_pickle=False) as arrays:
            return {name: arrays[name] for name in fields}
