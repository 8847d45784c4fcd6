"""Data and models in memory, from Python: `thresher.predict` and `thresher.run(data=,
model=)`. The data is written once to an Arrow IPC file that every worker maps
(`data.py`), the model sent as what its registered adapter reads or as a cloudpickle
(`objects.py`), and the job run by the engine as any other (`calls.py`)."""

__all__: list[str] = []
