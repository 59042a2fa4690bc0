// The thumbs mode: the item's responses one at a time; ↑ (or Y) thumb up, ↓ (or N) thumb down, each moving on to
// the next response; the thumb on the last response submits the item. ← / → go back to (or on to) another response
// of the item before it is submitted; Enter submits. Registered with static/annotation/annotate.js, loaded first.
window.preflabAnnotation.register("thumbs", (page) => {
  "use strict";

  const { $, $$, cards } = page;
  const MARKS = { up: "👍 up", down: "👎 down" };
  const SUMMARY = { up: "👍", down: "👎" };
  let at = 0; // the index of the response shown

  const input = (card) => $(".thumb-input", card);
  const current = () => cards()[at];
  const unlabelled = () => cards().filter((card) => !input(card)?.value);

  function show(index) {
    const all = cards();
    if (!all.length) return;
    at = Math.max(0, Math.min(all.length - 1, index));
    all.forEach((card, position) => card.classList.toggle("thumbs-away", position !== at));
    const position = $("#thumb-at", page.item());
    if (position) position.textContent = String(at + 1);
    refresh();
    current().focus();
  }

  function setThumb(value) {
    const card = current();
    if (!card) return;
    page.remember();
    input(card).value = value;
    page.refresh();
    if (at < cards().length - 1) show(at + 1);
    else if (ready()) page.send();
  }

  // True when the item may be sent; otherwise says which responses lack their thumb and shows the first.
  function ready() {
    const missing = unlabelled();
    if (!missing.length) return true;
    show(cards().indexOf(missing[0]));
    const letters = missing.map((card) => card.dataset.letter).join(", ");
    page.showError(`Give every response a thumb first (${letters} ${missing.length === 1 ? "has" : "have"} none).`);
    return false;
  }

  function refresh() {
    cards().forEach((card) => {
      const value = input(card)?.value || "";
      card.classList.toggle("ranked", Boolean(value));
      const mark = $(".thumb-mark", card);
      if (mark) mark.textContent = MARKS[value] || "";
    });
    $$("#thumb-summary [data-letter]", page.item()).forEach((entry, index) => {
      const card = cards().find((other) => other.dataset.letter === entry.dataset.letter);
      entry.textContent = `${entry.dataset.letter} ${SUMMARY[input(card)?.value] || "·"}`;
      entry.classList.toggle("current", index === at);
    });
    const value = current() ? input(current())?.value : "";
    $$(".thumb-button", page.item()).forEach((button) => button.classList.toggle("selected", button.dataset.thumb === value));
  }

  return {
    setUp() {
      const first = unlabelled()[0];
      at = first ? cards().indexOf(first) : 0;
      show(at);
      $$(".thumb-button", page.item()).forEach((button) => button.addEventListener("click", () => setThumb(button.dataset.thumb)));
      $$(".thumb-step", page.item()).forEach((button) => button.addEventListener("click", () => show(at + Number(button.dataset.step))));
      // A click on Submit goes through the same check as Enter (Skip's own htmx:confirm passes untouched).
      page.form()?.addEventListener("htmx:confirm", (event) => {
        const form = page.form();
        if (event.target !== form || form.dataset.sent) return;
        if (ready()) page.stamp(form);
        else event.preventDefault();
      });
    },

    // where the focus goes when the item is set up or a box is left: the response shown
    home: () => current(),

    key(event) {
      const key = event.key;
      const lower = key.toLowerCase();
      if (key === "ArrowUp" || lower === "y") { setThumb("up"); return true; }
      if (key === "ArrowDown" || lower === "n") { setThumb("down"); return true; }
      if (key === "ArrowLeft" || lower === "k") { show(at - 1); return true; }
      if (key === "ArrowRight" || lower === "j") { show(at + 1); return true; }
      if (key === "Enter") { if (ready()) page.send(); return true; }
      return false;
    },

    snapshot() {
      return { at, thumbs: Object.fromEntries(cards().map((card) => [card.dataset.responseId, input(card)?.value || ""])) };
    },

    restore(state) {
      cards().forEach((card) => {
        const box = input(card);
        if (box) box.value = state.thumbs[card.dataset.responseId] || "";
      });
      show(state.at);
    },

    refresh,
  };
});
