"""What software an image holds beyond the lock's components: its training code's content hash and the
Python packages installed, read in a container of the image (imagebuild/check/software_probe.py).

`build.py test` puts it in each image's check report entry (`software`); the release record copies it from
the entry that cleared the gate, and the release notes diff it against the previous release.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

PROBE = Path(__file__).with_name("software_probe.py")
RUN_TIMEOUT_S = 120


def describe(client: Any, image: str, lock: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """`{python, code, python_packages}` of `image`, or `{error}` saying why it could not be read."""
    lock = lock or {}
    python = str(lock.get("python") or "python3")
    code_dir = str((lock.get("training") or {}).get("code_dir") or "")
    container = None
    try:
        container = client.containers.create(
            image, [python, "-c", PROBE.read_text(), code_dir], entrypoint="", network_disabled=True
        )
        container.start()
        status = container.wait(timeout=RUN_TIMEOUT_S)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        if status.get("StatusCode") != 0:
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
            return {"error": f"{python} exited {status.get('StatusCode')}: {err.strip()[-300:]}"}
        doc = json.loads(out)
        return doc if isinstance(doc, dict) else {"error": f"the probe printed {out[-200:]!r}"}
    except ValueError as err:
        return {"error": f"the probe printed no JSON: {err}"}
    except Exception as err:  # noqa: BLE001 - docker API errors, a read timeout: say why, fail no check
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
