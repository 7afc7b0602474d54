// The labelling page: one image at a time, y / n answer the current question, d flags the image,
// u or Backspace undoes (the current image's answers locally, then the server's last ten), z zooms.
// An image's answers are sent together once its last question is answered, and the same request brings
// the next image; no page reloads. Progress is counted here and refreshed from the server now and then.
(() => {
  "use strict";

  const app = document.getElementById("label-app");
  const api = app.dataset.api;
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const $ = (id) => document.getElementById(id);
  const figure = $("figure");
  const image = $("label-image");
  const zoom = $("zoom");
  const question = $("question");
  const yes = $("answer-yes");
  const no = $("answer-no");
  const flagButton = $("flag");
  const status = $("status");
  const BUSY_RETRY_MS = 10000;
  const STATS_EVERY = 10; // images between progress refreshes

  let item = null; // the leased item: {item_id, image_url, width, height, questions: [...]}
  let index = 0; // the question being asked
  let answers = []; // answers to this item not yet sent
  let imageLoaded = false; // the current image is on screen: answers wait for it
  let shownAt = 0; // when the current question appeared on a loaded image
  let working = false; // a request is in flight: keys wait for it
  let answeredToday = 0;
  let sinceStats = 0; // images sent since the progress was last read

  async function call(method, path, body) {
    const response = await fetch(api + path, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrfToken },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
      throw new Error("Your session has ended: sign in again.");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error(data.detail || `The server answered ${response.status}.`);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function say(text) {
    status.textContent = text;
  }

  function setEnabled(enabled) {
    yes.disabled = no.disabled = flagButton.disabled = !enabled;
  }

  function showItem(next) {
    item = next;
    index = 0;
    answers = [];
    setZoom(false);
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
    $("question-count").textContent = `Question ${index + 1} of ${item.questions.length}`;
    question.textContent = current.text;
    image.alt = `The image to judge: ${current.text}`;
    shownAt = performance.now();
    if (imageLoaded) setEnabled(true);
  }

  function onImageLoaded() {
    if (imageLoaded || !item) return;
    imageLoaded = true;
    shownAt = performance.now();
    setEnabled(true);
  }

  function onImageFailed() {
    if (!item) return;
    say("The image did not load: flag it with D, or reload the page.");
    flagButton.disabled = false;
  }

  function showNothing(reason) {
    item = null;
    imageLoaded = false;
    answers = [];
    figure.hidden = true;
    image.removeAttribute("src");
    setEnabled(false);
    $("question-count").textContent = "";
    if (reason === "busy") {
      question.textContent = "Every open image is being labelled by someone else right now.";
      say("Checking again in a few seconds…");
      window.setTimeout(() => run(loadNext), BUSY_RETRY_MS);
    } else {
      question.textContent = "Nothing is left for you to label here. Thank you!";
    }
  }

  function showNext(data) {
    if (data.item) showItem(data.item);
    else showNothing(data.status);
  }

  async function loadNext() {
    showNext(await call("POST", "/next"));
  }

  async function refreshStats() {
    const stats = await call("GET", "/me");
    answeredToday = stats.answered_today;
    sinceStats = 0;
    $("answered-today").textContent = answeredToday;
    $("images-left").textContent = stats.images_left;
  }

  // Run one server step at a time; keys pressed meanwhile are ignored, errors are shown.
  async function run(step) {
    if (working) return;
    working = true;
    app.setAttribute("aria-busy", "true");
    try {
      await step();
    } catch (error) {
      say(error.message);
    } finally {
      working = false;
      app.removeAttribute("aria-busy");
    }
  }

  function answer(value) {
    if (working || !item || !imageLoaded) return;
    const current = item.questions[index];
    answers.push({ question_id: current.question_id, answer: value, seconds: (performance.now() - shownAt) / 1000 });
    if (index + 1 < item.questions.length) {
      index += 1;
      say(`Answered ${value ? "yes" : "no"}.`);
      showQuestion();
      return;
    }
    run(async () => {
      setEnabled(false);
      let result;
      try {
        result = await call("POST", "/answers", { answers, next: true });
      } catch (error) {
        answers.pop();
        setEnabled(true);
        throw error;
      }
      say(`Answered ${value ? "yes" : "no"}. Saved.`);
      showNext(result.next);
      answeredToday += result.recorded;
      $("answered-today").textContent = answeredToday;
      sinceStats += 1;
      if (sinceStats >= STATS_EVERY) await refreshStats();
    });
  }

  function flag() {
    if (working || !item) return;
    run(async () => {
      setEnabled(false);
      try {
        await call("POST", "/flags", { item_id: item.item_id });
        say("Flagged as too difficult or not a natural photo.");
      } catch (error) {
        if (error.status !== 409) {
          setEnabled(imageLoaded);
          throw error;
        }
        say(`Not flagged: ${error.message}. Here is the next image.`); // decided or discarded meanwhile
      }
      await loadNext();
      await refreshStats();
    });
  }

  function undo() {
    if (working) return;
    if (answers.length > 0) {
      answers.pop();
      index -= 1;
      say("Undone: answer this question again.");
      showQuestion();
      return;
    }
    run(async () => {
      const data = await call("POST", "/undo");
      const what = data.undone === "flag" ? "Flag undone" : "Last answer undone";
      if (data.item) {
        showItem(data.item);
        say(data.undone === "flag" ? `${what}: answer this image again.` : `${what}: answer it again.`);
      } else {
        // Nothing is left to ask there: others decided its questions meanwhile, or the panel discarded it.
        say(`${what}. That image needs no more answers (decided or discarded meanwhile).`);
        if (!item) await loadNext();
      }
      await refreshStats();
    });
  }

  function setZoom(on) {
    zoom.classList.toggle("zoomed", on);
    zoom.setAttribute("aria-pressed", String(on));
  }

  zoom.addEventListener("click", (event) => {
    const on = !zoom.classList.contains("zoomed");
    const box = image.getBoundingClientRect();
    const x = (event.clientX - box.left) / box.width;
    const y = (event.clientY - box.top) / box.height;
    setZoom(on);
    if (on && event.detail > 0) {
      zoom.scrollLeft = x * zoom.scrollWidth - zoom.clientWidth / 2;
      zoom.scrollTop = y * zoom.scrollHeight - zoom.clientHeight / 2;
    }
  });
  image.addEventListener("load", onImageLoaded);
  image.addEventListener("error", onImageFailed);
  yes.addEventListener("click", () => answer(true));
  no.addEventListener("click", () => answer(false));
  flagButton.addEventListener("click", flag);
  $("undo").addEventListener("click", undo);

  const KEYS = {
    y: () => answer(true),
    n: () => answer(false),
    d: flag,
    u: undo,
    backspace: undo,
    z: () => item && setZoom(!zoom.classList.contains("zoomed")),
  };
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (event.target.closest("input, textarea, select, [contenteditable]")) return;
    const action = KEYS[event.key.toLowerCase()];
    if (!action) return;
    event.preventDefault();
    action();
  });

  run(async () => {
    await loadNext();
    await refreshStats();
  });
})();
