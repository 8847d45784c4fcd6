"""examples/notebook.ipynb, run top to bottom in a real IPython kernel (nbclient), as a
data scientist would: `predict` equals the model's own predict_proba, `run` succeeds
with every row, and the progress shows as tqdm's notebook widget."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NOTEBOOK = Path(__file__).parents[2] / "examples" / "notebook.ipynb"


def test_the_example_notebook_runs_with_the_outputs_it_promises(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "equal to model.predict_proba: True" in printed
    assert "succeeded 11380 rows; 0 bad" in printed
    widgets = [
        o
        for o in outputs
        if o.output_type == "display_data"
        and "application/vnd.jupyter.widget-view+json" in o.data
        and "rows" in o.data.get("text/plain", "")
    ]
    assert len(widgets) == 2  # predict's bar and run's
