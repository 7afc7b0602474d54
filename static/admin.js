// Admin pages: forms marked data-api call the REST API with the page's CSRF token and say what happened;
// a [data-progress-url] section refreshes job progress and the leaderboard every few seconds.
"use strict";

const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
const REFRESH_MS = 4000;

// JSON body from a form: empty fields are left out, numbers and booleans typed by their inputs.
function jsonBody(form, skip) {
  const body = {};
  for (const element of form.elements) {
    if (!element.name || skip.has(element.name) || element.disabled) continue;
    if (element.type === "checkbox") { body[element.name] = element.checked; continue; }
    if (element.value === "") continue;
    if (element.dataset.type === "bool") body[element.name] = element.value === "true";
    else if (element.type === "number") body[element.name] = Number(element.value);
    else body[element.name] = element.value;
  }
  return body;
}

// Multipart body from a form, without empty fields or unchosen files (the API treats them as absent).
function multipartBody(form, skip) {
  const body = new FormData(form);
  for (const [name, value] of [...body.entries()]) {
    const empty = value instanceof File ? value.name === "" : value === "";
    if (empty || skip.has(name)) body.delete(name);
  }
  return body;
}

// The form's target: data-action with {field} placeholders filled from the form (those fields not sent).
function target(form) {
  const used = new Set();
  const url = (form.dataset.action || form.getAttribute("action")).replace(/\{(\w+)\}/g, (_, name) => {
    used.add(name);
    return encodeURIComponent(form.elements[name].value.trim());
  });
  return { url, used };
}

function outcome(payload) {
  if (Array.isArray(payload.added)) {
    const rejected = payload.rejected.map((file) => `${file.name} (${file.detail})`).join("; ");
    return `Added ${payload.added.length}, duplicates ${payload.duplicates.length}, rejected ${payload.rejected.length}`
      + (rejected ? `: ${rejected}` : ".");
  }
  return "Done.";
}

async function submitToApi(form) {
  const status = form.querySelector(".form-status");
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
  const { url, used } = target(form);
  const headers = { "X-CSRF-Token": csrfToken, Accept: "application/json" };
  let body;
  if (form.dataset.api === "json") {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(jsonBody(form, used));
  } else {
    body = multipartBody(form, used);
  }
  const buttons = form.querySelectorAll("button");
  buttons.forEach((button) => { button.disabled = true; });
  status.classList.remove("error");
  status.textContent = "Working…";
  try {
    const response = await fetch(url, { method: form.dataset.method || "POST", headers, body, credentials: "same-origin" });
    const payload = await response.json().catch(() => ({}));
    if (!response.ok) {
      status.classList.add("error");
      status.textContent = payload.detail ? String(typeof payload.detail === "string" ? payload.detail : JSON.stringify(payload.detail)) : `Failed (${response.status}).`;
      return;
    }
    status.textContent = outcome(payload);
    if (form.dataset.redirect) window.location.assign(form.dataset.redirect.replace("{id}", payload.id));
    else if (form.hasAttribute("data-reload")) window.setTimeout(() => window.location.reload(), 600);
  } catch (error) {
    status.classList.add("error");
    status.textContent = `Network error: ${error.message}`;
  } finally {
    buttons.forEach((button) => { button.disabled = false; });
  }
}

document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-api]");
  if (!form) return;
  event.preventDefault();
  submitToApi(form);
});

// Fields marked data-for="source-a source-b" show (and are sent) only for those values of the form's source.
function showSourceFields(select) {
  for (const field of select.form.querySelectorAll("[data-for]")) {
    const shown = field.dataset.for.split(" ").includes(select.value);
    field.hidden = !shown;
    field.querySelectorAll("input, select, textarea").forEach((input) => { input.disabled = !shown; });
  }
}
document.querySelectorAll("select[data-source-select]").forEach((select) => {
  select.addEventListener("change", () => showSourceFields(select));
  showSourceFields(select);
});

// Live progress: rebuild the progress and leaderboard rows from the API.
function cells(row, values) {
  row.replaceChildren(...values.map((value) => {
    const cell = document.createElement("td");
    cell.textContent = value;
    return cell;
  }));
  return row;
}

async function refreshProgress(section) {
  const [progress, board] = await Promise.all([
    fetch(section.dataset.progressUrl, { credentials: "same-origin" }).then((r) => r.json()),
    fetch(section.dataset.leaderboardUrl, { credentials: "same-origin" }).then((r) => r.json()),
  ]);
  section.querySelector("[data-field=pairs]").textContent = `${progress.pairs_selected} of ${progress.pairs_total}`;
  section.querySelector("[data-field=images]").textContent = progress.images;
  section.querySelector("[data-field=jobs]").textContent =
    Object.entries(progress.jobs_by_status).map(([name, count]) => `${count} ${name}`).join(", ") || "none";
  section.querySelector("#progress-rows").replaceChildren(...progress.classifiers.map((c) => cells(
    document.createElement("tr"),
    [c.name, c.status, `${c.images_predicted} / ${c.images_total}`, c.error || ""],
  )));
  const ranked = [...board.classifiers].sort((a, b) => a.mad_rank - b.mad_rank || a.classifier_id - b.classifier_id);
  section.querySelector("#standing-rows").replaceChildren(...ranked.map((s) => {
    const row = cells(document.createElement("tr"), [
      String(s.mad_rank), s.name, s.mad_score.toFixed(3), `${s.rank_low}–${s.rank_high}`,
      String(s.labelled_images), s.provisional ? "provisional" : "",
    ]);
    row.dataset.classifierId = s.classifier_id;
    return row;
  }));
  section.querySelector("[data-field=updated]").textContent = new Date().toLocaleTimeString();
}

document.querySelectorAll("[data-progress-url]").forEach((section) => {
  const tick = () => refreshProgress(section).catch(() => {}).finally(() => window.setTimeout(tick, REFRESH_MS));
  window.setTimeout(tick, REFRESH_MS);
});
