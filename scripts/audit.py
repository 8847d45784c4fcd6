"""Audit the installed dependencies for known vulnerabilities (pip-audit, PyPI's advisory
data); fail on any that a newer release fixes. Run by scripts/test.sh.

Exit 0: every package it could look up is clean (those it could not are named). Exit 1:
a vulnerability with a fix, or pip-audit broke. Exit 3: it could check no package at all
(a registry mirror without PyPI's JSON API: every package "not found") — said plainly,
and not a pass: scripts/test.sh says so last (and fails with THRESHER_AUDIT=required).
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_AUDITED = 3


def main() -> int:
    done = subprocess.run(
        [sys.executable, "-m", "pip_audit", "--skip-editable", "--progress-spinner", "off",
         "--format", "json"],
        capture_output=True,
        text=True,
        check=False,  # its exit status is read from its answer
    )  # fmt: skip
    try:
        dependencies = json.loads(done.stdout)["dependencies"]
    except (json.JSONDecodeError, KeyError):
        print(f"audit: pip-audit failed:\n{done.stderr}", file=sys.stderr)
        return 1
    audited = [d for d in dependencies if "skip_reason" not in d]
    fixable = [
        f"{d['name']} {d['version']}: {v['id']} (fixed in {', '.join(v['fix_versions'])})"
        for d in audited
        for v in d.get("vulns", [])
        if v.get("fix_versions")
    ]
    if fixable:
        print("audit: known vulnerabilities with a fix:\n  " + "\n  ".join(fixable))
        return 1
    if not audited:
        print(
            f"audit: NOT AUDITED: none of {len(dependencies)} packages could be checked"
            " (no advisory data reachable from this machine); this is no pass",
            file=sys.stderr,
        )
        return NOT_AUDITED
    skipped = [d["name"] for d in dependencies if "skip_reason" in d]
    if skipped:
        print(f"audit: {len(skipped)} packages could not be checked: {', '.join(skipped)}")
    print(f"audit: {len(audited)} packages audited, no known vulnerability with a fix")
    return 0


if __name__ == "__main__":
    sys.exit(main())
