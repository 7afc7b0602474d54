"""Layout checks in a Selenium page: what a person cannot see whole without scrolling sideways."""

CUT_OFF = """
const width = document.documentElement.clientWidth;
function cutOff(element) {
  const box = element.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) return false;  // not rendered
  if (box.left < -0.5 || box.right > width + 0.5) return true;
  for (let a = element.parentElement; a; a = a.parentElement) {
    const style = getComputedStyle(a);
    if (style.overflowX === "visible" && style.overflowY === "visible") continue;
    const frame = a.getBoundingClientRect();
    if (box.left < frame.left - 0.5 || box.right > frame.right + 0.5) return true;
  }
  return false;
}
const found = [...document.querySelectorAll(arguments[0])].filter(cutOff);
return found.map((e) => e.textContent.trim() || e.outerHTML);
"""


def cut_off(driver, selector: str) -> list[str]:
    """The elements matching `selector` that stick out sideways from the window or from an ancestor that
    clips or scrolls them (overflow other than visible): their text."""
    return driver.execute_script(CUT_OFF, selector)
