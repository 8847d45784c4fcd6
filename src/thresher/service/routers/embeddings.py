"""`POST /v1/embeddings`: OpenAI's synchronous embeddings, on a registered model. The
official client's `embeddings.create` works unchanged (it asks for base64 by default).
Concurrent requests for one model are embedded together, in the model's own process
(`background/encoders.py`)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from thresher.openai.bodies import embedding_answer
from thresher.service.background.encoders import EncoderCrashed, EncoderRefused, Encoders
from thresher.service.errors import BadRequest, ServiceError
from thresher.service.limits import Text
from thresher.service.policies.auth import Tenant
from thresher.service.state import ServiceState, StateDep

router = APIRouter(tags=["embeddings"])

MAX_INPUTS = 2048  # OpenAI's limit on one request's list of inputs


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Text
    input: str | list[str] = Field(description="A text, or a list of at most 2,048 texts.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = Field(None, max_length=256)


class Unavailable(ServiceError):
    """The model's process died while the request waited (503); send it again."""

    status = 503
    headers = {"Retry-After": "1"}  # noqa: RUF012 - read-only


def encoders(request: Request, state: ServiceState) -> Encoders:
    """The app's encoders, made on first use."""
    found = getattr(request.app.state, "encoders", None)
    if found is None:
        found = request.app.state.encoders = Encoders(state.config.models)
    assert isinstance(found, Encoders)
    return found


@router.post("/v1/embeddings", summary="Embed texts now")
def create_embeddings(
    body: EmbeddingRequest, request: Request, state: StateDep, tenant: Tenant
) -> dict[str, Any]:
    texts = [body.input] if isinstance(body.input, str) else body.input
    if not texts or len(texts) > MAX_INPUTS:
        raise BadRequest(f"input: give a text or a list of 1 to {MAX_INPUTS:,} texts")
    if body.model not in state.config.models:
        raise BadRequest(f"model: the server serves no model {body.model!r}")
    try:
        vectors = encoders(request, state).embed(body.model, texts)
    except EncoderCrashed as exc:
        raise Unavailable(f"model {body.model!r} could not answer: {exc}") from None
    except EncoderRefused as exc:
        raise BadRequest(f"model {body.model!r} could not embed the input: {exc}") from None
    answer, problem = embedding_answer(
        list(vectors.embeddings), int(vectors.tokens.sum()), body.model, body.encoding_format,
        body.dimensions,
    )  # fmt: skip
    if problem is not None:
        raise BadRequest(problem)
    return answer
