"""axe-core (vendored from npm: tests/support/axe/, version in AXE_VERSION) run inside a Selenium page."""

import json
from functools import cache
from pathlib import Path

AXE_DIR = Path(__file__).resolve().parent / "axe"
AXE_VERSION = "4.14.1"


@cache
def _axe_source() -> str:
    """The minified axe-core script."""
    return (AXE_DIR / "axe.min.js").read_text()


def axe_violations(driver) -> list[str]:
    """axe-core's violations on the page now, with every rule it runs by default, one line per rule:
    rule id, impact, help and the first offending elements."""
    if not driver.execute_script("return typeof window.axe === 'object'"):
        driver.execute_script(_axe_source())
    driver.set_script_timeout(60)
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then((r) => done(JSON.stringify(r.violations)), (e) => done(JSON.stringify("
        "[{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}])));"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(map(_where, v["nodes"][:4]))
        for v in json.loads(result)
    ]


def _where(node: dict) -> str:
    """An offending element's selector and the start of axe's advice on it."""
    return " ".join(node["target"]) + ": " + node.get("failureSummary", "")[:200]
