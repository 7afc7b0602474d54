// Forms marked data-api (admin pages, the account page) call the REST API with the page's CSRF token and say what happened, by
// name (data-done), until dismissed: a form that reloads the page (data-reload) or leaves it (data-redirect)
// hands its result to the next page through sessionStorage. A form marked data-copy="FIELD" shows that field of
// the answer (a one-time link) on its own, wrapped, with a Copy button. A refused form marks the fields at fault and
// takes the focus there. A [data-progress-url] section refreshes job progress and the leaderboard.
"use strict";

const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
const REFRESH_MS = 4000;
const RESULT_KEY = "mad-admin-result";
const LISTED_FILES = 50; // files named in an upload's result; the rest are counted
// The words of the results: English, or the page's language where the page gives them (account.html's form-text
// block, from the gettext catalogues; the admin pages stay English). word("key", {name}) fills each {name}.
const WORDS = {
  saved: "Saved.",
  working: "Working…",
  dismiss: "Dismiss",
  server: "The server answered {status}.",
  not_done: "Not done: {error}",
  fix_fields: "Not done: please correct these fields.",
  repeated_field: "The repeated field",
  not_sent: "Not sent: {label} differs from the first one.",
  ...JSON.parse(document.getElementById("form-text")?.textContent || "{}"),
};
const word = (key, values = {}) => WORDS[key].replace(/\{(\w+)\}/g, (whole, name) => String(values[name] ?? whole));

// Put a value at a dotted name: "questions.0.answer" sets body.questions[0].answer.
function setPath(body, name, value) {
  const parts = name.split(".");
  let node = body;
  parts.slice(0, -1).forEach((part, index) => {
    if (node[part] === undefined) node[part] = /^\d+$/.test(parts[index + 1]) ? [] : {};
    node = node[part];
  });
  node[parts[parts.length - 1]] = value;
}

// JSON body from a form: empty fields are left out (unless marked data-send-empty: clearing a text), numbers and booleans typed by their inputs, radio
// buttons by the one checked, dotted names nested; array entries left empty are dropped.
function jsonBody(form, skip) {
  const body = {};
  for (const element of form.elements) {
    if (!element.name || skip.has(element.name) || element.disabled) continue;
    if (element.type === "checkbox") { setPath(body, element.name, element.checked); continue; }
    if (element.type === "radio" && !element.checked) continue;
    if (element.value === "" && !element.hasAttribute("data-send-empty")) continue;
    if (element.dataset.type === "bool") setPath(body, element.name, element.value === "true");
    else if (element.type === "number" || element.dataset.type === "int") setPath(body, element.name, Number(element.value));
    else setPath(body, element.name, element.value);
  }
  for (const [name, value] of Object.entries(body)) {
    if (Array.isArray(value)) body[name] = value.filter((entry) => entry !== undefined);
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

// A form's name for the page after a reload: its id (every form that reloads has one).
function formKey(form) {
  return form.id || form.getAttribute("action");
}

// "{name}" in a template filled from the API's answer (a list: {count} and its first entry's fields).
function fill(template, payload) {
  const values = Array.isArray(payload) ? { count: payload.length, ...payload[0] } : payload;
  return template.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

function uploadResult(payload) {
  const count = (list, what) => `${list.length} ${what}`;
  const text = `Uploaded: ${count(payload.added, "added")}, ${count(payload.duplicates, "already there")}, `
    + `${count(payload.rejected, "rejected")}.`;
  const files = [
    ...payload.duplicates.map((file) => `${file.name}: already there (${file.detail})`),
    ...payload.rejected.map((file) => `${file.name}: rejected (${file.detail})`),
  ];
  const listed = files.slice(0, LISTED_FILES);
  if (files.length > listed.length) listed.push(`and ${files.length - listed.length} more`);
  return { text, items: listed, kind: payload.rejected.length ? "warning" : "done" };
}

function successResult(form, payload) {
  if (Array.isArray(payload.added)) return uploadResult(payload);
  const copy = form.dataset.copy ? { value: String(payload[form.dataset.copy]), label: form.dataset.copyLabel } : null;
  const values = form.hasAttribute("data-preview") ? { ...payload, ...payload.reselection } : payload;
  return { text: fill(form.dataset.done || word("saved"), values), items: [], kind: "done", copy };
}

// A form marked data-preview (a change of the selection settings, which may drop votes) is sent twice: first
// as a dry run, whose answer's `reselection` fills data-preview (and data-preview-study when study
// participants' votes would drop), then, pressed again, with confirm. Editing a field goes back to the first.
const PREVIEWED = "previewed";

function previewStep(form) {
  if (!form.hasAttribute("data-preview")) return {};
  return form.dataset.step === PREVIEWED ? { confirm: true } : { dry_run: true };
}

function armPreview(form, armed) {
  form.dataset.step = armed ? PREVIEWED : "";
  const button = form.querySelector("button[type=submit]");
  button.textContent = armed ? button.dataset.confirmLabel : button.dataset.previewLabel;
  return button;
}

function previewResult(form, payload) {
  const found = payload.reselection;
  if (!found) return { text: form.dataset.previewUnchanged, items: [], kind: "done" };
  const items = found.study_votes_dropped ? [fill(form.dataset.previewStudy, found)] : [];
  return { text: fill(form.dataset.preview, found), items, kind: found.votes_dropped ? "warning" : "done" };
}

// The dry run's answer shown, and the button, now applying, given the focus (a press of Enter or Space applies).
function showPreview(form, status, payload) {
  showResult(status, previewResult(form, payload));
  if (!payload.reselection) return;
  const button = armPreview(form, true);
  button.disabled = false;
  button.focus();
}

document.addEventListener("input", (event) => {
  const form = event.target.closest("form[data-preview]");
  if (form && form.dataset.step === PREVIEWED) armPreview(form, false);
});

// Copy a value to the clipboard: the Clipboard API where the page may use it, else the selected text.
async function copyText(element) {
  try {
    await navigator.clipboard.writeText(element.textContent);
    return true;
  } catch {
    const range = document.createRange();
    range.selectNodeContents(element);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    return document.execCommand("copy");
  }
}

// A value to copy (a one-time link): shown whole, wrapped within the box, with a Copy button that says
// whether it worked.
function copyField(copy) {
  const field = Object.assign(document.createElement("div"), { className: "copy-field" });
  const value = Object.assign(document.createElement("code"), { className: "copy-value", textContent: copy.value });
  const button = Object.assign(document.createElement("button"), { type: "button", textContent: "Copy" });
  if (copy.label) button.setAttribute("aria-label", `Copy the ${copy.label}`);
  const said = Object.assign(document.createElement("span"), { className: "copy-said" }); // in the form's status: read out
  button.addEventListener("click", async () => {
    said.textContent = (await copyText(value)) ? "Copied." : "Select it and copy it with Ctrl+C.";
  });
  field.replaceChildren(value, button, said);
  return field;
}

// The API's refusal: its message, and for a validation error each field with what is wrong with it.
function errorResult(form, response, payload) {
  if (!Array.isArray(payload.detail)) {
    const text = payload.detail ? String(payload.detail) : word("server", { status: response.status });
    return { text: word("not_done", { error: text }), items: [], kind: "error", fields: [] };
  }
  const fields = [];
  const items = payload.detail.map((error) => {
    const name = (error.loc || []).slice(1).join(".");
    const named = form.elements[name];
    const field = named instanceof RadioNodeList ? named[0] : named; // a radio group: its first button
    if (field) fields.push(field);
    const label = field?.closest("fieldset")?.querySelector("legend")?.textContent.trim()
      || field?.labels?.[0]?.textContent.trim() || name;
    return `${label}: ${error.msg}`;
  });
  return { text: word("fix_fields"), items, kind: "error", fields };
}

// Show a result in a status box until its Dismiss button is pressed, scrolled into view, with the focus.
function showResult(status, result) {
  const text = document.createElement("p");
  text.textContent = result.text;
  const parts = [text];
  if (result.items.length) {
    const list = document.createElement("ul");
    list.replaceChildren(...result.items.map((item) => Object.assign(document.createElement("li"), { textContent: item })));
    parts.push(list);
  }
  if (result.copy) parts.push(copyField(result.copy));
  const dismiss = Object.assign(document.createElement("button"), { type: "button", textContent: word("dismiss") });
  dismiss.className = "dismiss";
  dismiss.addEventListener("click", () => clearResult(status));
  parts.push(dismiss);
  status.replaceChildren(...parts);
  status.className = `form-status result ${result.kind}`;
  status.tabIndex = -1;
  for (let details = status.closest("details"); details; details = details.parentElement.closest("details")) {
    details.open = true; // a result inside a closed disclosure is shown
  }
  const firstField = (result.fields || [])[0];
  (firstField || status).focus({ preventScroll: true });
  status.scrollIntoView({ block: "nearest" });
}

function clearResult(status) {
  status.replaceChildren();
  status.className = "form-status";
  const form = status.closest("form");
  if (form) form.querySelectorAll("[aria-invalid]").forEach((field) => field.removeAttribute("aria-invalid"));
}

let statusCount = 0;

function markFields(form, status, fields) {
  form.querySelectorAll("[aria-invalid]").forEach((field) => field.removeAttribute("aria-invalid"));
  if (!status.id) status.id = `form-status-${++statusCount}`;
  for (const field of fields) {
    field.setAttribute("aria-invalid", "true");
    field.setAttribute("aria-describedby", status.id);
  }
}

// Fields marked data-same-as="NAME" (a password typed twice) must equal field NAME; they are not sent.
function mismatch(form) {
  const fields = [...form.querySelectorAll("[data-same-as]")].filter(
    (field) => field.value !== form.elements[field.dataset.sameAs].value,
  );
  if (!fields.length) return null;
  const label = fields[0].labels?.[0]?.textContent.trim() || word("repeated_field");
  return { text: word("not_sent", { label }), items: [], kind: "error", fields };
}

async function submitToApi(form) {
  const status = form.querySelector(".form-status");
  if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
  const refused = mismatch(form);
  if (refused) {
    markFields(form, status, refused.fields);
    showResult(status, refused);
    return;
  }
  const { url, used } = target(form);
  const headers = { "X-CSRF-Token": csrfToken, Accept: "application/json" };
  let body;
  if (form.dataset.api === "json") {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify({ ...jsonBody(form, used), ...previewStep(form) });
  } else {
    body = multipartBody(form, used);
  }
  const buttons = form.querySelectorAll("button[type=submit]");
  buttons.forEach((button) => { button.disabled = true; });
  status.className = "form-status";
  status.textContent = word("working");
  try {
    const response = await fetch(url, { method: form.dataset.method || "POST", headers, body, credentials: "same-origin" });
    const payload = await response.json().catch(() => ({}));
    if (!response.ok) {
      const result = errorResult(form, response, payload);
      markFields(form, status, result.fields);
      showResult(status, result);
      return;
    }
    if (previewStep(form).dry_run) {
      showPreview(form, status, payload);
      return;
    }
    const result = successResult(form, payload);
    if (form.dataset.redirect) {
      window.sessionStorage.setItem(RESULT_KEY, JSON.stringify({ key: "page", result }));
      window.location.assign(fill(form.dataset.redirect, payload));
    } else if (form.hasAttribute("data-reload")) {
      window.sessionStorage.setItem(RESULT_KEY, JSON.stringify({ key: formKey(form), result }));
      window.location.reload();
    } else {
      form.reset(); // a password typed there should not linger
      markFields(form, status, []);
      showResult(status, result);
    }
  } catch (error) {
    showResult(status, { text: `Not done: the network failed (${error.message}).`, items: [], kind: "error" });
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

// The result a form handed over before the page reloaded (or the page it led to), shown where it belongs.
function showHandedOverResult() {
  const stored = window.sessionStorage.getItem(RESULT_KEY);
  if (!stored) return;
  window.sessionStorage.removeItem(RESULT_KEY);
  const { key, result } = JSON.parse(stored);
  const form = [...document.querySelectorAll("form[data-api]")].find((candidate) => formKey(candidate) === key);
  const status = form ? form.querySelector(".form-status") : document.getElementById("page-status");
  if (status) showResult(status, result);
}
showHandedOverResult();

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

// A pair's disagreements passing each diagnosed threshold, as app/core/selection.py survivors_text writes it.
function survivorsText(diagnosis) {
  if (!diagnosis) return "";
  return ["absolute", "quantile"].map((rule) => (rule === "absolute" ? "T " : "quantile ")
    + diagnosis.survivors.filter((s) => s.rule === rule).map((s) => `${s.threshold}: ${s.images}`).join(" · ")).join(" | ");
}

async function refreshProgress(section) {
  const [progress, board] = await Promise.all([
    fetch(section.dataset.progressUrl, { credentials: "same-origin" }).then((r) => r.json()),
    fetch(section.dataset.leaderboardUrl, { credentials: "same-origin" }).then((r) => r.json()),
  ]);
  const shortOfK = progress.pairs_empty || progress.pairs_short
    ? ` (${progress.pairs_empty} empty, ${progress.pairs_short} short of k)` : "";
  section.querySelector("[data-field=pairs]").textContent = `${progress.pairs_selected} of ${progress.pairs_total}${shortOfK}`;
  section.querySelector("[data-field=images]").textContent = progress.images;
  section.querySelector("[data-field=jobs]").textContent =
    Object.entries(progress.jobs_by_status).map(([name, count]) => `${count} ${name}`).join(", ") || "none";
  section.querySelector("[data-field=workers]").textContent =
    progress.workers.map((w) => `${w.worker} seen ${w.seen_ago} ago`).join(", ") || "none seen yet";
  const warning = section.querySelector("[data-field=worker-warning]");
  warning.textContent = progress.worker_warning || "";
  warning.hidden = !progress.worker_warning;
  section.querySelector("#progress-rows").replaceChildren(...progress.classifiers.map((c) => cells(
    document.createElement("tr"),
    [c.name, c.status, `${c.images_predicted} / ${c.images_total}`, `${c.pairs_empty} of ${c.pairs_selected}`, c.error || ""],
  )));
  const fillRule = section.querySelector("#pair-selections").hasAttribute("data-fill");
  const belowT = (p) => (p.below_threshold || fillRule ? `, ${p.below_threshold} below T` : "");
  section.querySelector("#pair-rows").replaceChildren(...progress.pairs.map((p) => cells(
    document.createElement("tr"),
    [`${p.classifier_a} vs ${p.classifier_b}`, `${p.selected} of ${p.k}${belowT(p)}`, p.diagnosis ? String(p.diagnosis.disagreements) : "—",
      p.diagnosis ? String(p.diagnosis.confident) : "—", survivorsText(p.diagnosis), p.shortfall || ""],
  )));
  // By MAD rank, those without one (null) last, as the page first draws them.
  const rankOf = (s) => (s.mad_rank === null ? Infinity : s.mad_rank);
  const ranked = [...board.classifiers].sort((a, b) => rankOf(a) - rankOf(b) || a.classifier_id - b.classifier_id);
  section.querySelector("#standing-rows").replaceChildren(...ranked.map((s) => {
    const row = cells(document.createElement("tr"), [
      s.no_rank ? "—" : String(s.mad_rank), s.name, s.no_rank ? "—" : s.mad_score.toFixed(3),
      s.rank_low === null ? "—" : `${s.rank_low}–${s.rank_high}`,
      String(s.labelled_images), s.no_rank ? `no rank: ${s.no_rank}` : s.provisional ? "provisional" : "",
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
