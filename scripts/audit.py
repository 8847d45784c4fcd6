"""Audit the installed dependencies for known vulnerabilities (pip-audit, PyPI's advisory
data); fail on any that a newer release fixes. Run by scripts/test.sh.

A machine that cannot reach the advisory data (a registry mirror without PyPI's JSON
API: every package comes back "not found") gets a warning instead of a pass it did not
earn; `THRESHER_AUDIT_REQUIRED=1` makes that a failure too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main() -> int:
    done = subprocess.run(
        [sys.executable, "-m", "pip_audit", "--skip-editable", "--progress-spinner", "off",
         "--format", "json"],
        capture_output=True,
        text=True,
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
            f"audit: WARNING: none of {len(dependencies)} packages could be audited"
            " (no advisory data reachable from this machine)",
            file=sys.stderr,
        )
        return 1 if os.environ.get("THRESHER_AUDIT_REQUIRED") == "1" else 0
    print(f"audit: {len(audited)} packages audited, no known vulnerability with a fix")
    return 0


if __name__ == "__main__":
    sys.exit(main())
