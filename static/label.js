// The labelling page: one image at a time. Y / N answer the current question, D flags the image as too
// difficult, P as not a natural photo, S skips it, U or Backspace undoes (the current image's answers locally, then the server's last
// ten), I shows what the class means, Z zooms (arrow keys pan, + and − zoom further; tap and pinch on touch).
// An image's answers are sent together once its last question is answered, and the same request brings the
// next image; no page reloads. Answers that meet an ended session are kept and sent after signing in again.
// Whenever the page has shown what comes next (an image, nothing left, a pause), it tells the page's other
// scripts with a "label:shown" event on #label-app whose detail.status is "item" or the reason (a crowd
// study's page leaves the study then: static/study.js).
(() => {
  "use strict";

  const app = document.getElementById("label-app");
  const api = app.dataset.api;
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const $ = (id) => document.getElementById(id);
  // The page's words in the annotator's language (label.html, from the gettext catalogues): t("key", {name})
  // fills each {name}.
  const TEXT = JSON.parse($("label-text").textContent);
  const t = (key, values = {}) => TEXT[key].replace(/\{(\w+)\}/g, (whole, name) => String(values[name] ?? whole));
  const plural = new Intl.PluralRules(app.dataset.locale);
  const number = new Intl.NumberFormat(app.dataset.locale); // 1,234 in English, 1.234 in German
  const figure = $("figure");
  const frame = $("zoom-frame");
  const image = $("label-image");
  const zoomButton = $("zoom");
  const question = $("question");
  const yes = $("answer-yes");
  const no = $("answer-no");
  const flagButton = $("flag");
  const artificialButton = $("flag-artificial");
  const skipButton = $("skip");
  const defineButton = $("define");
  const definitionBox = $("definition-box");
  const status = $("status");
  const resumeSkipped = $("resume-skipped");
  const whereNext = $("label-done");
  const questionControls = [
    $("answer-buttons"), flagButton, artificialButton, skipButton, defineButton, $("definition-box"),
  ];
  const BUSY_RETRY_MS = 10000;
  const STATS_EVERY = 10; // images between progress refreshes
  const UNDO_LIMIT = 10; // the server keeps the last ten answers editable
  const ZOOM = { toggle: 2.5, step: 1.5, max: 6, pan: 0.2 };
  const flagDecidesAlone = "flagDecidesAlone" in app.dataset; // a panel of one: one flag discards the image
  const storageKey = `mad-label-${app.dataset.competition}-${app.dataset.user}`;
  const pendingKey = `mad-pending-${app.dataset.competition}`;

  let item = null; // the leased item: {item_id, image_url, width, height, questions: [...]}
  let index = 0; // the question being asked
  let answers = []; // answers to this item not yet sent
  let imageLoaded = false; // the current image is on screen: answers wait for it
  let shownAt = 0; // when the current question appeared on a loaded image
  let working = false; // a request is in flight: keys wait for it
  let answeredToday = 0;
  let imagesLeft = null; // images left for this annotator, as the server last said, less those finished since
  let sinceStats = 0; // images finished since the progress was last read
  let scale = 1; // the image's zoom: 1 fits the frame
  let flagAsked = null; // the flag reason asked about on this image, where one flag decides alone

  // What survives a reload of this tab: how many steps the server can undo, and each recent image's
  // question count (an image brought back by undo shows only its open questions).
  const memory = { undoable: 0, totals: {}, ...JSON.parse(sessionStorage.getItem(storageKey) || "{}") };
  function remember() {
    const recent = Object.keys(memory.totals).slice(-2 * UNDO_LIMIT);
    memory.totals = Object.fromEntries(recent.map((id) => [id, memory.totals[id]]));
    sessionStorage.setItem(storageKey, JSON.stringify(memory));
  }

  class RequestError extends Error {
    constructor(message, statusCode) {
      super(message);
      this.status = statusCode;
    }
  }

  async function call(method, path, body) {
    let response;
    try {
      response = await fetch(api + path, {
        method,
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrfToken },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new RequestError(t("network"), 0);
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) throw new RequestError(sentence(data.detail) || t("server", { status: response.status }), response.status);
    return data;
  }

  function sentence(text) {
    if (typeof text !== "string" || !text) return "";
    return text[0].toUpperCase() + text.slice(1) + (/[.!?]$/.test(text) ? "" : ".");
  }

  function say(text) {
    status.textContent = text;
  }

  function signInAgain() {
    say(t("session_ended"));
    window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
  }

  function setEnabled(enabled) {
    for (const button of [yes, no, flagButton, artificialButton, skipButton, defineButton]) button.disabled = !enabled;
  }

  // After an answer the keyboard focus is on the next question's first control, not lost to the page
  // (a disabled button drops it), unless it is somewhere else the annotator put it. A touch screen's page
  // keeps no focus: there it would only draw a ring.
  const touchOnly = window.matchMedia("(hover: none) and (pointer: coarse)").matches;
  function focusQuestion() {
    const focused = document.activeElement;
    const lost = !focused || focused === document.body;
    if ((lost && !touchOnly) || focused?.closest(".label-panel")) yes.focus({ preventScroll: true });
  }

  function showItem(next) {
    item = next;
    index = 0;
    flagAsked = null;
    answers = [];
    memory.totals[item.item_id] ??= item.questions.length;
    remember();
    resumeSkipped.hidden = true;
    whereNext.hidden = true;
    for (const control of questionControls) control.hidden = false;
    definitionBox.hidden = defineButton.getAttribute("aria-expanded") !== "true";
    zoomTo(1);
    imageLoaded = false;
    setEnabled(false);
    image.src = item.image_url;
    image.width = item.width;
    image.height = item.height;
    figure.hidden = false;
    showQuestion();
    if (image.complete && image.naturalWidth > 0) onImageLoaded(); // already loaded (the same image again)
  }

  // Answers wait for the image, and each question's time counts from when it can be seen.
  function showQuestion() {
    const current = item.questions[index];
    const total = memory.totals[item.item_id];
    const before = total - item.questions.length; // answered before an undo brought the image back
    $("question-count").textContent = t("question_count", { number: before + index + 1, total });
    question.textContent = current.text;
    image.alt = t("image_alt", { question: current.text });
    $("question-language").textContent = current.language === app.dataset.locale ? "" : t("in_english");
    $("question-language").hidden = current.language === app.dataset.locale;
    showDefinition();
    shownAt = performance.now();
    if (imageLoaded) {
      setEnabled(true);
      focusQuestion();
    }
  }

  function showDefinition() {
    if (!item) return;
    const current = item.questions[index];
    $("definition").textContent = current.definition
      ? t("definition", { name: current.class_name, definition: current.definition })
      : t("no_definition", { name: current.class_name });
  }

  // The definition opens below the buttons, so that nothing under the pointer moves; its box is a live
  // region, read out when it opens and when the next question changes it.
  function toggleDefinition() {
    if (!item) return;
    const open = definitionBox.hidden;
    definitionBox.hidden = !open;
    defineButton.setAttribute("aria-expanded", String(open));
    if (open) showDefinition();
  }

  function onImageLoaded() {
    if (imageLoaded || !item) return;
    imageLoaded = true;
    shownAt = performance.now();
    setEnabled(true);
    focusQuestion();
  }

  function onImageFailed() {
    if (!item) return;
    say(t("image_failed"));
    flagButton.disabled = artificialButton.disabled = skipButton.disabled = false;
  }

  const NOTHING = {
    busy: t("busy"),
    skipped: t("skipped"),
    finished: t("finished"),
    settled: t("settled"),
    paused: t("paused"),
  };

  function showNothing(reason) {
    item = null;
    imageLoaded = false;
    answers = [];
    figure.hidden = true;
    image.removeAttribute("src");
    for (const control of questionControls) control.hidden = true; // nothing to answer: no dead buttons
    $("question-count").textContent = "";
    $("question-language").hidden = true;
    question.textContent = NOTHING[reason] || NOTHING.finished;
    resumeSkipped.hidden = reason !== "skipped";
    whereNext.hidden = reason === "busy";
    if (reason === "busy") {
      say(t("checking"));
      window.setTimeout(() => run(loadNext), BUSY_RETRY_MS);
    }
  }

  // The counters are read again every few images, and whenever the queue has nothing to give, so that
  // "Images left for you" agrees with what the page says then.
  async function showNext(data) {
    if (data.item) showItem(data.item);
    else showNothing(data.status);
    if (!data.item || sinceStats >= STATS_EVERY) await refreshStats();
    shown(data.item ? "item" : data.status);
  }

  function shown(status) {
    app.dispatchEvent(new CustomEvent("label:shown", { detail: { status } }));
  }

  // Quality control paused the annotator here: say why; nothing more can be answered until an admin decides.
  function showPaused(reason) {
    showNothing("paused");
    question.textContent = reason;
    say("");
    shown("paused");
  }

  async function showAfterAnswers(result) {
    if (result.paused) showPaused(result.paused);
    else await showNext(result.next);
  }

  async function loadNext() {
    await showNext(await call("POST", "/next"));
  }

  function showImagesLeft() {
    $("images-left").textContent = imagesLeft == null ? "–" : number.format(imagesLeft);
  }

  async function refreshStats() {
    const stats = await call("GET", "/me");
    answeredToday = stats.answered_today;
    imagesLeft = stats.images_left;
    sinceStats = 0;
    $("answered-today").textContent = number.format(answeredToday);
    showImagesLeft();
  }

  function finishedOne() {
    sinceStats += 1;
    if (imagesLeft !== null) imagesLeft = Math.max(0, imagesLeft - 1);
    showImagesLeft();
  }

  // What became of an image's answers: counted at once, or waiting for other annotators of the panel.
  function fate(needed) {
    if (needed === 0) return t("counts_now");
    return t(plural.select(needed) === "one" ? "needed_one" : "needed_other", { count: needed });
  }

  // Run one server step at a time; keys pressed meanwhile are ignored; errors are shown in words.
  async function run(step) {
    if (working) return;
    working = true;
    app.setAttribute("aria-busy", "true");
    try {
      await step();
    } catch (error) {
      if (error.status === 401) signInAgain();
      else say(error.message);
    } finally {
      working = false;
      app.removeAttribute("aria-busy");
    }
  }

  function counted(recorded) {
    memory.undoable = Math.min(UNDO_LIMIT, memory.undoable + recorded);
    remember();
  }

  // Answers on their way are kept in this tab until the server has them: if the session has ended, they
  // are sent once the annotator has signed in again (and only as the same person).
  function keepPending(sending) {
    sessionStorage.setItem(pendingKey, JSON.stringify({ user: app.dataset.user, answers: sending }));
  }

  async function sendAnswers(sending) {
    keepPending(sending);
    const result = await call("POST", "/answers", { answers: sending, next: true });
    sessionStorage.removeItem(pendingKey);
    counted(result.recorded);
    answeredToday += result.recorded;
    $("answered-today").textContent = number.format(answeredToday);
    return result;
  }

  async function sendKeptAnswers() {
    const kept = JSON.parse(sessionStorage.getItem(pendingKey) || "null");
    if (!kept || kept.user !== app.dataset.user) {
      sessionStorage.removeItem(pendingKey);
      return false;
    }
    try {
      const result = await sendAnswers(kept.answers);
      say(t("sent_kept", { count: kept.answers.length }));
      if (result.item_done) finishedOne();
      await showAfterAnswers(result);
    } catch (error) {
      if (error.status === 401) throw error;
      sessionStorage.removeItem(pendingKey);
      say(t("not_saved", { error: error.message }));
      await loadNext();
    }
    return true;
  }

  function answer(value) {
    if (working || !item || !imageLoaded) return;
    flagAsked = null;
    const current = item.questions[index];
    answers.push({ question_id: current.question_id, answer: value, seconds: (performance.now() - shownAt) / 1000 });
    if (index + 1 < item.questions.length) {
      index += 1;
      say(t(value ? "answered_yes" : "answered_no"));
      showQuestion();
      return;
    }
    run(async () => {
      setEnabled(false);
      let result;
      try {
        result = await sendAnswers(answers);
      } catch (error) {
        if (error.status !== 401) {
          sessionStorage.removeItem(pendingKey);
          answers.pop();
          setEnabled(true);
          focusQuestion();
        }
        throw error;
      }
      say(t(value ? "saved_yes" : "saved_no", { fate: fate(result.annotators_needed) }));
      if (result.item_done) finishedOne();
      await showAfterAnswers(result);
    });
  }

  // reason: "too_difficult" or "not_natural" (not a natural photo); either counts towards replacing the image.
  // Where one flag decides alone (a panel of one), the first press asks, and the same key again flags.
  function flag(reason) {
    if (working || !item) return;
    if (flagDecidesAlone && flagAsked !== reason) {
      flagAsked = reason;
      say(t(reason === "not_natural" ? "flag_alone_p" : "flag_alone_d"));
      return;
    }
    flagAsked = null;
    run(async () => {
      setEnabled(false);
      try {
        const result = await call("POST", "/flags", { item_id: item.item_id, reason });
        if (!result.discarded) counted(1); // a flag the panel acted on cannot be undone
        say(
          t(reason === "not_natural" ? "flagged_not_natural" : "flagged_too_difficult") +
          (result.discarded ? ` ${t("discarded")}` : ""),
        );
      } catch (error) {
        if (error.status !== 409) {
          setEnabled(imageLoaded);
          throw error;
        }
        say(t("not_flagged", { error: error.message })); // decided or discarded meanwhile
      }
      await loadNext();
      await refreshStats();
    });
  }

  function skip() {
    if (working || !item) return;
    run(async () => {
      setEnabled(false);
      try {
        await showNext(await call("POST", "/skip", { item_id: item.item_id }));
      } catch (error) {
        setEnabled(imageLoaded);
        throw error;
      }
      say(t("skipped_one"));
    });
  }

  function undo() {
    if (working) return;
    if (answers.length > 0) {
      answers.pop();
      index -= 1;
      say(t("undone_local"));
      showQuestion();
      return;
    }
    if (memory.undoable === 0) {
      say(t("nothing_to_undo_tab", { limit: UNDO_LIMIT }));
      return;
    }
    run(async () => {
      let data;
      try {
        data = await call("POST", "/undo");
      } catch (error) {
        if (error.status === 404 || (error.status === 409 && /only the last/.test(error.message))) {
          memory.undoable = 0;
          remember();
          say(
            /stays/.test(error.message)
              ? error.message
              : t("nothing_more_to_undo", { limit: UNDO_LIMIT }),
          );
          return;
        }
        throw error;
      }
      memory.undoable -= 1;
      remember();
      const kept = data.flags_kept ? ` ${t("flags_kept")}` : "";
      const what = t(data.undone === "flag" ? "flag_undone" : "answer_undone") + kept;
      if (data.item) {
        showItem(data.item);
        say(t("answer_again", { what }));
      } else {
        // Nothing is left to ask there: others decided its questions meanwhile, or the panel discarded it.
        say(t("no_more_answers", { what }));
        if (!item) await loadNext();
      }
      await refreshStats();
    });
  }

  // Zoom keeps the point at (x, y) of the frame where it is (the centre by default); the image box grows
  // to `scale` times the frame, and the frame scrolls.
  function zoomTo(next, x = frame.clientWidth / 2, y = frame.clientHeight / 2) {
    const target = Math.min(ZOOM.max, Math.max(1, next));
    const contentX = (frame.scrollLeft + x) / scale;
    const contentY = (frame.scrollTop + y) / scale;
    scale = target;
    image.style.width = image.style.height = `${scale * 100}%`;
    frame.classList.toggle("zoomed", scale > 1);
    frame.tabIndex = scale > 1 ? 0 : -1; // a zoomed frame scrolls, so the keyboard can reach it
    frame.scrollLeft = scale > 1 ? contentX * scale - x : 0;
    frame.scrollTop = scale > 1 ? contentY * scale - y : 0;
    zoomButton.setAttribute("aria-pressed", String(scale > 1));
  }

  function toggleZoom(x, y) {
    if (item) zoomTo(scale > 1 ? 1 : ZOOM.toggle, x, y);
  }

  function pan(dx, dy) {
    frame.scrollLeft += dx * frame.clientWidth * ZOOM.pan;
    frame.scrollTop += dy * frame.clientHeight * ZOOM.pan;
  }

  frame.addEventListener("click", (event) => {
    const box = frame.getBoundingClientRect();
    toggleZoom(event.clientX - box.left, event.clientY - box.top);
  });

  // Two fingers zoom about their midpoint; one finger scrolls a zoomed image (the browser does that).
  let pinch = null;
  function spread(touches) {
    const box = frame.getBoundingClientRect();
    const [a, b] = touches;
    return {
      distance: Math.hypot(a.clientX - b.clientX, a.clientY - b.clientY),
      x: (a.clientX + b.clientX) / 2 - box.left,
      y: (a.clientY + b.clientY) / 2 - box.top,
    };
  }
  frame.addEventListener("touchstart", (event) => {
    if (event.touches.length !== 2 || !item) return;
    event.preventDefault();
    pinch = { ...spread(event.touches), scale };
  }, { passive: false });
  frame.addEventListener("touchmove", (event) => {
    if (!pinch || event.touches.length !== 2) return;
    event.preventDefault();
    const now = spread(event.touches);
    zoomTo(pinch.scale * (now.distance / pinch.distance), now.x, now.y);
  }, { passive: false });
  frame.addEventListener("touchend", (event) => {
    if (event.touches.length < 2) pinch = null;
  });

  image.addEventListener("load", onImageLoaded);
  image.addEventListener("error", onImageFailed);
  zoomButton.addEventListener("click", () => toggleZoom());
  yes.addEventListener("click", () => answer(true));
  no.addEventListener("click", () => answer(false));
  flagButton.addEventListener("click", () => flag("too_difficult"));
  artificialButton.addEventListener("click", () => flag("not_natural"));
  skipButton.addEventListener("click", skip);
  defineButton.addEventListener("click", toggleDefinition);
  $("undo").addEventListener("click", undo);
  resumeSkipped.addEventListener("click", () => run(loadNext));

  const KEYS = {
    y: () => answer(true),
    n: () => answer(false),
    d: () => flag("too_difficult"),
    p: () => flag("not_natural"),
    s: skip,
    u: undo,
    backspace: undo,
    i: toggleDefinition,
    z: () => toggleZoom(),
    "+": () => item && zoomTo(scale * ZOOM.step),
    "=": () => item && zoomTo(scale * ZOOM.step),
    "-": () => item && zoomTo(scale / ZOOM.step),
  };
  const ARROWS = { arrowleft: [-1, 0], arrowright: [1, 0], arrowup: [0, -1], arrowdown: [0, 1] };
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest("input, textarea, select, [contenteditable]")) return;
    const key = event.key.toLowerCase();
    if (ARROWS[key] && scale > 1) {
      event.preventDefault();
      pan(...ARROWS[key]);
      return;
    }
    const action = KEYS[key];
    if (!action || event.repeat) return;
    event.preventDefault();
    action();
  });

  run(async () => {
    await refreshStats();
    if (app.dataset.paused) showPaused(app.dataset.paused);
    else if (!(await sendKeptAnswers())) await loadNext();
  });
})();
