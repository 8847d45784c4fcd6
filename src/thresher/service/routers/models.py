"""`GET /v1/models` and `GET /v1/models/{model}`: the models a tenant may name, in
OpenAI's shape, so the official client's `client.models.list()` and `retrieve()` work
unchanged. Every tenant may run every model the config registers, so each sees them all,
by the names it submits jobs with — never their kind, file or options (the server's own).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from thresher.service.errors import NotFound
from thresher.service.policies.auth import Tenant
from thresher.service.state import ServiceState, StateDep

router = APIRouter(prefix="/v1/models", tags=["models"])

# Whose models they are, in OpenAI's `owned_by`: the server's operator, not a tenant.
OWNER = "thresher"


class ModelInfo(BaseModel):
    """One registered model, as OpenAI describes a model."""

    id: str
    object: Literal["model"] = "model"
    # Unix seconds: when this server registered it (read its config, at start).
    created: int
    owned_by: str = OWNER


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelInfo]


def _info(state: ServiceState, name: str) -> ModelInfo:
    return ModelInfo(id=name, created=state.started_at)


@router.get("", summary="List the models jobs and batches may name")
def list_models(state: StateDep, tenant: Tenant) -> ModelList:
    """The registered models, by name, in name order."""
    return ModelList(data=[_info(state, name) for name in sorted(state.config.models)])


@router.get("/{model}", summary="A registered model")
def get_model(model: str, state: StateDep, tenant: Tenant) -> ModelInfo:
    if model not in state.config.models:
        raise NotFound(f"model: the server serves no model {model!r}")
    return _info(state, model)
