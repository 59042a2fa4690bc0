// The annotate page, whatever the project's mode: keys, drag and drop, undo, back to the previous item, word
// diff, layout toggle. Each mode's own controls and keys are in its script (static/annotation/modes/<mode>.js,
// loaded after this one), which registers itself with window.preflabAnnotation.register.
// The item area (#annotate-item) is replaced by htmx after each submit, so state lives per item and the
// key handler (bound once) always looks the current item up.
(() => {
  "use strict";

  const modes = {};       // name -> the mode's hooks, as its script registered them

  let item = null;        // the current #annotate-item element
  let startedAt = 0;      // when the item was shown, for "seconds spent"
  let undoStack = [];
  let picked = [];        // responses chosen for the diff

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const cards = () => (item ? $$(".response", item) : []);
  const form = () => (item ? $("#item-form", item) : null);
  const mode = () => modes[item?.dataset.mode] || {};
  // where the focus goes on a fresh item and when a box is left: the mode's choice, else the first response
  const home = () => mode().home?.() || cards()[0];

  function snapshot() {
    return {
      order: cards().map((card) => card.dataset.responseId),
      entered: mode().snapshot?.(),
      focus: focused()?.dataset.responseId,
    };
  }

  function remember() {
    undoStack.push(snapshot());
    // a change made after accepting the machine's suggestion makes the answer the annotator's own
    const accepted = form()?.elements.suggestion;
    if (accepted) accepted.value = "";
  }

  function restore(state) {
    const container = $("#responses", item);
    const had = state.focus ? $(`.response[data-response-id="${state.focus}"]`, container) : focused();
    // Moving a node drops its focus, so only reorder when the order changed, then focus again.
    if (state.order.join() !== snapshot().order.join()) {
      state.order.forEach((id) => container.appendChild($(`.response[data-response-id="${id}"]`, container)));
    }
    (had || cards()[0])?.focus();
    mode().restore?.(state.entered);
    refresh();
  }

  function refresh() {
    mode().refresh?.();
    showError("");
  }

  function showError(text) {
    const box = item && $("#item-error", item);
    if (box) box.textContent = text;
  }

  function focused() {
    return document.activeElement?.closest?.(".response") || null;
  }

  function focusCard(offset) {
    const all = cards();
    if (!all.length) return;
    const index = all.indexOf(focused());
    const next = index < 0 ? 0 : Math.min(all.length - 1, Math.max(0, index + offset));
    all[next].focus();
  }

  // A mode whose controls are choice buttons (data-choice) with a hidden "choice" input: a choice submits at once.
  function choose(choice) {
    const input = form()?.elements.choice;
    if (!input) return;
    input.value = choice;
    $$(".choice", item).forEach((button) => button.classList.toggle("selected", button.dataset.choice === choice));
    send();
  }

  // M: the machine's suggestion (the banner's, for every response) filled into the controls and submitted. The
  // posted suggestion id lets the server record the answer's origin, which it does only when the answer is the
  // suggestion unchanged.
  function acceptSuggestion() {
    const banner = item && $("#suggestion", item);
    const target = form();
    if (!banner || !target || !banner.dataset.complete || target.dataset.sent) return;
    remember();
    const fill = JSON.parse(banner.dataset.fill);
    Object.entries(fill).forEach(([name, value]) => {
      const field = target.elements[name];
      if (field) field.value = value;
    });
    $$(".choice", item).forEach((button) => button.classList.toggle("selected", button.dataset.choice === fill.choice));
    refresh();
    target.elements.suggestion.value = banner.dataset.suggestion;
    send();
  }

  function send() {
    const target = form();
    if (!target || target.dataset.sent) return; // one submit per item, however often Enter is pressed
    stamp(target);
    target.requestSubmit();
  }

  function stamp(target) {
    target.dataset.sent = "1";
    target.elements.seconds.value = ((performance.now() - startedAt) / 1000).toFixed(1);
  }

  function toggleCollapse(card) {
    if (!card) return;
    card.classList.toggle("collapsed");
    const button = $(".collapse-toggle", card);
    if (button) button.textContent = card.classList.contains("collapsed") ? "expand" : "collapse";
  }

  // Word-level diff (longest common subsequence on words and the spaces between them).
  function words(text) {
    return text.split(/(\s+)/).filter((token) => token.length);
  }

  function diffTokens(a, b) {
    const rows = a.length + 1;
    const cols = b.length + 1;
    const table = new Uint32Array(rows * cols);
    for (let i = a.length - 1; i >= 0; i--) {
      for (let j = b.length - 1; j >= 0; j--) {
        table[i * cols + j] = a[i] === b[j] ? table[(i + 1) * cols + j + 1] + 1
          : Math.max(table[(i + 1) * cols + j], table[i * cols + j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) { out.push(["same", a[i]]); i++; j++; }
      else if (j < b.length && (i === a.length || table[i * cols + j + 1] >= table[(i + 1) * cols + j])) { out.push(["ins", b[j]]); j++; }
      else { out.push(["del", a[i]]); i++; }
    }
    return out;
  }

  function showDiff(first, second) {
    const panel = $("#diff-panel", item);
    const limit = 3000; // words; beyond this the quadratic table gets slow
    const a = words($(".md", first).innerText).slice(0, limit);
    const b = words($(".md", second).innerText).slice(0, limit);
    panel.replaceChildren();
    const title = document.createElement("div");
    title.className = "muted small";
    title.textContent = `Word diff: ${first.dataset.letter} → ${second.dataset.letter} (D on a response to pick again)`;
    panel.appendChild(title);
    for (const [kind, token] of diffTokens(a, b)) {
      const node = kind === "same" ? document.createTextNode(token) : document.createElement(kind);
      if (kind !== "same") node.textContent = token;
      panel.appendChild(node);
    }
    panel.hidden = false;
  }

  function pickForDiff(card) {
    if (!card) return;
    if (picked.length === 2) {
      picked.forEach((other) => other.classList.remove("picked"));
      picked = [];
      $("#diff-panel", item).hidden = true;
    }
    picked.push(card);
    card.classList.add("picked");
    if (picked.length === 2) showDiff(picked[0], picked[1]);
  }

  function toggleDialog(id) {
    const dialog = document.getElementById(id);
    if (!dialog) return;
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  function toggleLayout() {
    const side = !document.body.classList.contains("responses-side");
    document.body.classList.toggle("responses-side", side);
    localStorage.setItem("preflab-annotation-layout", side ? "side" : "stacked");
    applyLayout();
  }

  function applyLayout() {
    const container = item && $("#responses", item);
    if (container) container.classList.toggle("side", document.body.classList.contains("responses-side"));
  }

  function bindDragAndDrop() {
    let dragged = null;
    let orderBefore = "";
    cards().forEach((card) => {
      card.addEventListener("dragstart", () => {
        dragged = card;
        orderBefore = snapshot().order.join();
        remember();
        card.classList.add("dragging");
      });
      // The card moves while dragged over the others; wherever the drag ends (on a card or between two), the mode
      // is told once that it has a new place.
      card.addEventListener("dragend", () => {
        card.classList.remove("dragging");
        dragged = null;
        if (snapshot().order.join() !== orderBefore) mode().dropped?.(card);
      });
      card.addEventListener("dragover", (event) => {
        event.preventDefault();
        if (!dragged || dragged === card) return;
        const box = card.getBoundingClientRect();
        const after = event.clientY > box.top + box.height / 2;
        if (after) card.after(dragged);
        else card.before(dragged);
      });
      card.addEventListener("drop", (event) => event.preventDefault());
    });
  }

  function setUp(root) {
    item = root;
    item.dataset.ready = "1"; // htmx has processed it: its controls work (tests wait for this too)
    startedAt = performance.now();
    undoStack = [];
    picked = [];
    applyLayout();
    bindDragAndDrop();
    $$(".collapse-toggle", item).forEach((button) => button.addEventListener("click", () => toggleCollapse(button.closest(".response"))));
    $$(".diff-pick", item).forEach((button) => button.addEventListener("click", () => pickForDiff(button.closest(".response"))));
    $$(".choice", item).forEach((button) => button.addEventListener("click", () => choose(button.dataset.choice)));
    $("#undo-button", item)?.addEventListener("click", undo);
    $("#accept-suggestion", item)?.addEventListener("click", acceptSuggestion);
    const start = $("#start-button", item);
    if (start) { start.focus(); return; } // the guidelines before the first item: no item's controls yet
    mode().setUp?.();
    home()?.focus();
  }

  function undo() {
    const state = undoStack.pop();
    if (state) restore(state);
  }

  // Keys of the page, not of an item: they work even while a new item is being swapped in.
  const pageKeys = {
    g: () => toggleDialog("guidelines-dialog"),
    "?": () => toggleDialog("keys-dialog"),
    l: () => toggleLayout(),
  };

  function onKey(event) {
    if (!item || event.ctrlKey || event.metaKey || event.altKey) return;
    const keyed = mode().keyedInputs; // the mode's boxes that take the page's keys (a rank box takes digits)
    const typing = event.target.closest?.(`textarea, input:not([type=checkbox])${keyed ? `:not(${keyed})` : ""}`);
    if (typing) {
      if (event.key === "Escape") { event.target.blur(); home()?.focus(); }
      return;
    }
    // In a rank box Backspace deletes the digit, as anywhere one types.
    if (event.key === "Backspace" && event.target.closest?.("input")) return;
    if (document.querySelector("dialog[open]")) return; // the dialog handles Esc itself
    const key = event.key;
    const pageKey = pageKeys[key.toLowerCase()];
    if (pageKey) { pageKey(); event.preventDefault(); return; }
    // A key pressed between a swap and htmx processing the new item would act on the old, detached one.
    if (!item.isConnected) return;
    const card = focused();
    const handled = (() => {
      const start = $("#start-button", item);
      if (start) {
        if (key === "Enter") start.click();
        return key === "Enter";
      }
      if (key.toLowerCase() === "m") { acceptSuggestion(); return true; }
      if (mode().key?.(event, card)) return true;
      const choice = mode().choiceKeys?.[key.toLowerCase()];
      if (choice) { choose(choice); return true; }
      if (DOWN_KEYS.includes(key)) { focusCard(1); return true; }
      if (UP_KEYS.includes(key)) { focusCard(-1); return true; }
      switch (key.toLowerCase()) {
        case "s": $("#skip-button", item)?.click(); return true;
        case "u": undo(); return true;
        case "backspace": $("#back-button", item)?.click(); return true;
        case "d": pickForDiff(card || cards()[0]); return true;
        case "c": toggleCollapse(card); return true;
        case "r": $("textarea[name=rationale]", item)?.focus(); return true;
        default: return false;
      }
    })();
    if (handled) event.preventDefault();
  }

  const DOWN_KEYS = ["ArrowDown", "ArrowRight", "j"];
  const UP_KEYS = ["ArrowUp", "ArrowLeft", "k"];

  // What a mode's script may use: the current item and its parts, and the page's shared actions.
  const page = {
    $, $$, cards, form, focused, remember, refresh, showError, send, stamp, DOWN_KEYS, UP_KEYS,
    item: () => item,
  };

  // A mode's script calls this with its name and a function of `page` giving its hooks, each optional:
  // setUp() binds its controls on a fresh item; key(event, focusedCard) handles a key first (true: handled);
  // snapshot() / restore(state) carry its controls' state through undo; refresh() after a change; home() the element
  // to focus on a fresh item and after Esc (the first response otherwise); dropped(card)
  // after a response is dragged to a new place (the page shows it there already); keyedInputs, a selector of its
  // inputs that are not for typing; choiceKeys, the keys that choose (and submit) one of its choice buttons:
  // {key: data-choice}.
  window.preflabAnnotation = {
    register(name, hooks) { modes[name] = hooks(page); },
  };

  function init() {
    if (localStorage.getItem("preflab-annotation-layout") === "side") document.body.classList.add("responses-side");
    document.addEventListener("keydown", onKey);
    document.getElementById("layout-toggle")?.addEventListener("click", toggleLayout);
    $$("[data-open]").forEach((button) => button.addEventListener("click", () => toggleDialog(button.dataset.open)));
    // An item is set up (and its first response focused) only once htmx has processed it: htmx:load fires
    // for the page when the DOM is loaded, and for each swapped-in item after it settles. A key pressed on
    // an item htmx had not bound yet would submit its form natively, with a full page load.
    document.body.addEventListener("htmx:load", () => {
      const fresh = document.getElementById("annotate-item");
      if (fresh && fresh !== item) setUp(fresh);
    });
    // After a server error, or a refusal the server put into the item's error box (the form left as the
    // annotator filled it in), let the annotator send again.
    const allowResend = () => {
      const target = form();
      if (target) delete target.dataset.sent;
    };
    document.body.addEventListener("htmx:responseError", allowResend);
    document.body.addEventListener("htmx:afterSwap", (event) => {
      if (event.detail.target?.id === "item-error") allowResend();
    });
  }

  init();
})();
