"""OpenAI's Files API (batch_api/files.py): POST /v1/files (multipart: `file`, `purpose` and an
optional `expires_after`, batch_api/expiry.py),
GET /v1/files (newest first by default; `purpose`, `limit`, `order`, `after`), GET /v1/files/{id},
GET /v1/files/{id}/content and DELETE /v1/files/{id}."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from treespec.gateway.batch_api.expiry import upload_expiry
from treespec.gateway.batch_api.files import UPLOAD_PURPOSES
from treespec.gateway.errors import APIError
from treespec.gateway.responses_api.listing import page
from treespec.gateway.state import GatewayState, gateway_state

router = APIRouter()
State = Annotated[GatewayState, Depends(gateway_state)]

MAX_FILES_PAGE = 10_000  # OpenAI's bound on a page of files


@router.post("/v1/files")
async def upload_file(request: Request, state: State) -> dict[str, Any]:
    try:
        form = await request.form(max_files=1, max_fields=8)
    except HTTPException as exc:  # Starlette's word on a form it could not read (too many files, ...)
        raise APIError(400, f"The upload could not be read: {exc.detail}", code="invalid_body") from None
    try:
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise APIError(
                400,
                "The request needs a 'file' part (multipart/form-data).",
                param="file",
                code="missing_required_parameter",
            )
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(
                400,
                f"'purpose' must be one of {', '.join(UPLOAD_PURPOSES)} (got {purpose!r}).",
                code="invalid_value",
                param="purpose",
            )
        expires_after_s = upload_expiry(form, purpose)
        content = await upload.read()
        filename = upload.filename or "upload"
    finally:
        await form.close()
    return (await state.files.add(filename, purpose, content, expires_after_s)).body()


@router.get("/v1/files")
async def list_files(
    state: State,
    purpose: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_FILES_PAGE)] = MAX_FILES_PAGE,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
    after: Annotated[str | None, Query(min_length=1)] = None,
) -> dict[str, Any]:
    return page(await state.files.listed(purpose), "The file list", limit, order, after)


@router.get("/v1/files/{file_id}")
async def retrieve_file(file_id: str, state: State) -> dict[str, Any]:
    return (await state.files.get(file_id)).body()


@router.get("/v1/files/{file_id}/content")
async def file_content(file_id: str, state: State) -> Response:
    return Response(await state.files.content(file_id), media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, state: State) -> dict[str, Any]:
    await state.files.delete(file_id)
    return {"id": file_id, "object": "file", "deleted": True}
