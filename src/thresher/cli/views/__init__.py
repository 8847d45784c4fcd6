"""What the commands draw on a terminal: jobs (`status`), a job's end (`summary`), quality
(`quality`). Text that comes from specs and tenants is shown as text (`status.shown`)."""

__all__: list[str] = []
