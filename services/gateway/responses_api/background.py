"""Responses made in the background (`background: true`, as on OpenAI's service and vLLM): answered
at once with status `in_progress`, then made by a task of the gateway's and stored as they end
(`completed` or `incomplete`, `failed` with its error, or `cancelled` by
`POST /v1/responses/{id}/cancel`); a client polls `GET /v1/responses/{id}`. They live in the
response store, so they need it (`--responses-store-size` above 0)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from treespec.gateway.errors import APIError

if TYPE_CHECKING:  # job.py imports the run, which imports the gateway's state, which holds this
    from treespec.gateway.responses_api.job import ResponseJob

log = logging.getLogger(__name__)


class BackgroundResponses:
    def __init__(self) -> None:
        self._making: dict[str, tuple[ResponseJob, asyncio.Task[None]]] = {}

    def start(self, job: ResponseJob) -> dict[str, Any]:
        """Store the response as in progress and start making it; what the request is answered with."""
        if not job.stores:
            raise APIError(
                400,
                "A background response must be stored (store: true, and a server whose "
                "--responses-store-size is above 0), for it is fetched later by its id.",
                code="invalid_value",
                param="background",
            )
        begun = job.body(None, "in_progress")
        job.keep(begun)
        response_id = job.run.id
        task = asyncio.create_task(self._make(job), name=f"response {response_id}")
        self._making[response_id] = (job, task)
        task.add_done_callback(lambda _: self._making.pop(response_id, None))
        return begun

    def cancel(self, response_id: str) -> dict[str, Any] | None:
        """Stop making the response and store it as cancelled; None when none of that id is being made."""
        making = self._making.get(response_id)
        if making is None or making[1].done():  # done: stored already, as it ended
            return None
        job, task = self._making.pop(response_id)
        task.cancel()  # closes its generation: the verifier frees the request
        cancelled = job.body(None, "cancelled")
        job.keep(cancelled)
        return cancelled

    async def close(self) -> None:
        """Cancel every response still being made (the gateway is stopping)."""
        tasks = [task for _, task in self._making.values()]
        for response_id in list(self._making):
            self.cancel(response_id)
        await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    async def _make(job: ResponseJob) -> None:
        try:
            await job.whole()
        except APIError as error:
            job.keep(_failed(job, error.code or "server_error", error.message))
        except Exception as exc:  # recorded in the response: nobody awaits the task to raise it to
            log.exception("background response %s failed", job.run.id)
            job.keep(_failed(job, "server_error", f"The response could not be made: {exc!r}"))


def _failed(job: ResponseJob, code: str, message: str) -> dict[str, Any]:
    return {**job.body(None, "failed"), "error": {"code": code, "message": message}}
