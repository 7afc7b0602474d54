// Every page: a table too wide for the screen scrolls sideways in its own box; such a box becomes a named
// region that Tab reaches, so that keyboard users can scroll it with the arrow keys too. A table marked
// rows-on-phone is a card per row on a narrow screen instead (static/app.css): each of its cells is labelled
// with its column's header (data-label, which the card shows before it), and explicit ARIA roles keep it a
// table for screen readers whatever its display; rows the page rebuilds (live progress) are labelled again.
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

function labelCells(table) {
  const headers = [...(table.tHead?.rows[0]?.cells || [])].map((cell) => cell.textContent.trim());
  table.setAttribute("role", "table");
  for (const group of table.querySelectorAll(":scope > thead, :scope > tbody")) group.setAttribute("role", "rowgroup");
  for (const row of table.rows) {
    row.setAttribute("role", "row");
    [...row.cells].forEach((cell, column) => {
      if (cell.parentElement.parentElement === table.tHead) {
        cell.setAttribute("role", "columnheader");
      } else if (cell.tagName === "TH") {
        cell.setAttribute("role", "rowheader");
      } else {
        cell.setAttribute("role", "cell");
        if (!cell.dataset.label && headers[column]) cell.dataset.label = headers[column];
      }
    });
  }
}

for (const table of document.querySelectorAll("table.rows-on-phone")) {
  labelCells(table);
  new MutationObserver(() => labelCells(table)).observe(table, { childList: true, subtree: true });
}

let pending = false;
window.addEventListener("resize", () => {
  if (pending) return;
  pending = true;
  window.requestAnimationFrame(() => { pending = false; makeScrollersReachable(); });
});
makeScrollersReachable();
