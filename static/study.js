// A crowd study's pages (templates/study_label.html, study_done.html). On the labelling page: after each image
// the page has shown (label.js's "label:shown" event) and when the participant's time is up, ask the server how
// far they are; once an outcome is due (enough images, nothing left, paused by quality control, time up) leave
// the study and go to the completion code; once the required images are answered, offer to finish early. On
// the completion page: go back to the platform with the code after a few seconds, unless asked to stay.
(() => {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const TEXT = JSON.parse($("study-text")?.textContent || "{}");
  const t = (key, values = {}) => TEXT[key].replace(/\{(\w+)\}/g, (whole, name) => String(values[name] ?? whole));

  const done = $("study-done");
  if (done) {
    const timer = window.setTimeout(() => window.location.assign(done.dataset.url), Number(done.dataset.seconds) * 1000);
    $("complete").focus();
    $("stay").addEventListener("click", () => {
      window.clearTimeout(timer);
      $("countdown").textContent = t("stayed");
      $("stay").hidden = true;
      $("complete").focus();
    });
    return;
  }

  const app = $("label-app");
  if (!app?.dataset.study) return;
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const finishButton = $("finish-study");
  const number = new Intl.NumberFormat(app.dataset.locale);
  let checking = false;
  let leaving = false;

  async function call(method, path) {
    const response = await fetch(app.dataset.study + path, {
      method,
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRF-Token": csrfToken },
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(data.detail || String(response.status));
    return data;
  }

  async function leave() {
    if (leaving) return;
    leaving = true;
    try {
      await call("POST", "/me/finish");
      $("status").textContent = t("leaving");
      window.location.assign(app.dataset.studyDone);
    } catch (error) {
      leaving = false;
      $("status").textContent = t("not_finished", { error: error.message });
    }
  }

  // How far the participant is; leave when an outcome is due. A failed read is tried again after the next image.
  async function check() {
    if (checking || leaving) return;
    checking = true;
    try {
      const me = await call("GET", "/me");
      $("study-images").textContent = number.format(me.images);
      finishButton.hidden = !me.may_finish;
      if (me.outcome || me.outcome_due) await leave();
    } catch {
      // the labelling page says what failed; the next image checks again
    } finally {
      checking = false;
    }
  }

  app.addEventListener("label:shown", check);
  finishButton.addEventListener("click", leave);
  const untilDeadline = Date.parse(app.dataset.deadline) - Date.now();
  window.setTimeout(check, Math.max(0, Math.min(untilDeadline, 2 ** 31 - 1)) + 1000);
})();
