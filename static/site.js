// Every page: a table too wide for the screen scrolls sideways in its own box; such a box becomes a named
// region that Tab reaches, so that keyboard users can scroll it with the arrow keys too.
"use strict";

function tableName(box) {
  const caption = box.querySelector("caption");
  if (caption) return caption.textContent.trim();
  const heading = box.closest("section")?.querySelector("h2, h3");
  return heading ? heading.textContent.trim() : "Table";
}

function makeScrollersReachable() {
  for (const box of document.querySelectorAll(".table-scroll")) {
    if (box.scrollWidth > box.clientWidth + 1) {
      box.tabIndex = 0;
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", `${tableName(box)} (scrolls sideways)`);
    } else {
      ["tabindex", "role", "aria-label"].forEach((name) => box.removeAttribute(name));
    }
  }
}

let pending = false;
window.addEventListener("resize", () => {
  if (pending) return;
  pending = true;
  window.requestAnimationFrame(() => { pending = false; makeScrollersReachable(); });
});
makeScrollersReachable();
