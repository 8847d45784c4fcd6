// The jobs table refreshes itself from /ui/jobs.json every two seconds (the page's own
// origin; the session cookie goes with it), so progress advances without a reload.
"use strict";

function cell(row, field, text) {
  const found = row.querySelector(`[data-field="${field}"]`);
  if (found && found.textContent !== text) { found.textContent = text; }
}

function update(table, jobs) {
  for (const job of jobs) {
    const row = table.querySelector(`tr[data-id="${CSS.escape(job.id)}"]`);
    if (!row) { continue; }  // a job newer than the page: shown at the next load
    const status = row.querySelector('[data-field="status"]');
    status.className = `state ${job.status}`;
    cell(row, "status", job.status);
    const bar = document.createElement("progress");
    bar.max = 100; bar.value = job.percent;
    const progress = row.querySelector('[data-field="progress"]');
    progress.replaceChildren(bar, ` ${job.progress.shards_done}/${job.progress.shards_total}`);
    cell(row, "rows", String(job.request_counts.total));
    cell(row, "rate", job.rate === null ? "" : String(job.rate));
    cell(row, "eta", job.eta === null ? "" : `${job.eta} s`);
    cell(row, "errors", String(job.errors));
    cell(row, "started", (job.started_at || "").slice(0, 19));
    cell(row, "duration", job.duration);
  }
}

function live(table) {
  const url = table.dataset.live;
  const refresh = async () => {
    try {
      const answer = await fetch(url, { credentials: "same-origin" });
      if (answer.ok) { update(table, (await answer.json()).data); }
    } catch (err) { /* the server is restarting: try again at the next tick */ }
  };
  setInterval(refresh, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.querySelector("table[data-live]");
  if (table) { live(table); }
});
