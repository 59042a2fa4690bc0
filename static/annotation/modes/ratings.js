// The ratings mode: every response rated on each of the project's aspects, one box per (response, aspect). A digit
// rates the focused box and moves the focus to the next box (the response's next aspect, then the next response's
// first); ↑ / ↓ move between boxes; Enter submits once every box is filled. Registered with
// static/annotation/annotate.js, which is loaded first.
window.preflabAnnotation.register("ratings", (page) => {
  "use strict";

  const { $, $$, cards } = page;
  const boxes = () => $$(".rating-input", page.item());
  const focusedBox = () => (document.activeElement?.matches?.(".rating-input") ? document.activeElement : null);
  const empty = () => boxes().filter((box) => !box.value);

  function scale() {
    const legend = $("#rating-legend", page.item());
    return { min: Number(legend?.dataset.min ?? 1), max: Number(legend?.dataset.max ?? 5) };
  }

  // The rating a digit key gives: the digit itself, or 10 for 0 on a scale that reaches 10.
  function ratingOf(digit) {
    const { min, max } = scale();
    const value = digit === 0 && max === 10 ? 10 : digit;
    return value >= min && value <= max ? value : null;
  }

  function describe(box) {
    return `${box.closest(".response")?.dataset.letter} ${box.closest(".rating")?.dataset.aspect || ""}`.trim();
  }

  function rate(box, digit) {
    const value = ratingOf(digit);
    if (value === null) {
      const { min, max } = scale();
      page.showError(`${digit} is not on this project's scale: rate from ${min} to ${max}.`);
      return;
    }
    page.remember();
    box.value = String(value);
    page.refresh();
    const all = boxes();
    (all[all.indexOf(box) + 1] || empty()[0] || box).focus();
  }

  function step(offset) {
    const all = boxes();
    if (!all.length) return;
    const index = all.indexOf(focusedBox());
    all[index < 0 ? 0 : Math.max(0, Math.min(all.length - 1, index + offset))].focus();
  }

  // True when the ratings may be sent; otherwise says what is missing and focuses it.
  function ready() {
    const missing = empty();
    if (!missing.length) return true;
    const named = missing.slice(0, 6).map(describe).join(", ") + (missing.length > 6 ? ` and ${missing.length - 6} more` : "");
    page.showError(`Rate every response on every aspect first (${named} not rated).`);
    missing[0].focus();
    return false;
  }

  return {
    keyedInputs: ".rating-input",

    setUp() {
      boxes().forEach((box) => {
        box.addEventListener("focus", () => page.remember());
        box.addEventListener("change", page.refresh);
      });
      page.form()?.addEventListener("htmx:confirm", (event) => {
        const form = page.form();
        if (event.target !== form || form.dataset.sent) return;
        if (ready()) page.stamp(form);
        else event.preventDefault();
      });
    },

    // where the focus goes when the item is set up or a box is left: the first box without a rating
    home: () => empty()[0] || boxes()[0],

    key(event, card) {
      const key = event.key;
      if (/^[0-9]$/.test(key)) {
        const box = focusedBox() || (card && $$(".rating-input", card).find((other) => !other.value)) || empty()[0];
        if (box) rate(box, Number(key));
        return true;
      }
      if (page.DOWN_KEYS.includes(key)) { step(1); return true; }
      if (page.UP_KEYS.includes(key)) { step(-1); return true; }
      if (key === "Enter") { if (ready()) page.send(); return true; }
      return false;
    },

    snapshot() {
      return Object.fromEntries(boxes().map((box) => [box.name, box.value]));
    },

    restore(state) {
      boxes().forEach((box) => { box.value = state[box.name] ?? ""; });
    },

    refresh() {
      cards().forEach((card) => card.classList.toggle("ranked", $$(".rating-input", card).every((box) => box.value)));
    },
  };
});
