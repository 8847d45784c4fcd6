"""The service's webhooks: one sender (`thresher.notify`, shared with `thresher run`) for
the server's life, signed with its `webhook_secret`, hooked on the service's ends — a
job's (`notify.webhook`, `[monitor] alert_webhook`), a schedule tick's
(`notify.on_missed`) and an OpenAI-style batch's (its tenant's webhook endpoints).
Deliveries a stopped server left pending resume when it starts again.
"""

from __future__ import annotations

from collections.abc import Callable

from thresher.notify.sender import RetryPolicy, WebhookSender, WebhookSettings
from thresher.service.state import ServiceState

__all__ = ["start_webhooks"]


def start_webhooks(
    state: ServiceState, settings: WebhookSettings | None = None
) -> Callable[[], None]:
    """Deliver the service's webhooks: registers the sender's hooks on `state`
    (`on_job_finished`, `on_tick_missed`, `on_batch_ended`), resumes pending deliveries,
    and returns the stop function."""
    config = state.config
    if settings is None:
        if not config.webhook_secret:
            raise ValueError("webhook_secret is not set; load the config with load_config()")
        settings = WebhookSettings(
            config.webhook_secret,
            config.webhook_allow_private,
            quarantine_after=config.quarantine_after,
            timeout=config.webhook_timeout,
            workers=config.webhook_workers,
            per_tenant=config.webhook_workers_per_tenant,
            retry=RetryPolicy(
                config.webhook_retry_first,
                config.webhook_retry_longest,
                config.webhook_retry_hours * 3600,
            ),
        )
    sender = WebhookSender(state.store, settings)
    state.on_job_finished.append(sender.job_finished)
    state.on_tick_missed.append(sender.tick_missed)
    state.on_batch_ended.append(sender.batch_ended)
    state.redeliver = sender.redeliver
    sender.resume_pending()
    return sender.close
