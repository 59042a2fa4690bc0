// The ranking mode's controls and keys: 1-9 rank the focused response, Shift+arrows move it, Enter submits,
// X marks all bad. Registered with static/annotation/annotate.js, which is loaded first.
window.preflabAnnotation.register("ranking", (page) => {
  "use strict";

  const { $, $$, cards } = page;
  const allBadBox = () => $("#all-bad", page.item());

  function setRank(card, rank) {
    const input = $(".rank-input", card);
    if (!input || rank > cards().length) return;
    page.remember();
    input.value = String(rank);
    page.refresh();
    const unranked = cards().find((other) => !$(".rank-input", other).value);
    (unranked || card).focus();
  }

  function ranksFromOrder() {
    cards().forEach((card, index) => {
      const input = $(".rank-input", card);
      if (input) input.value = String(index + 1);
    });
    page.refresh();
  }

  function moveCard(card, offset) {
    const all = cards();
    const index = all.indexOf(card);
    const target = all[index + offset];
    if (!target) return;
    page.remember();
    if (offset < 0) target.before(card);
    else target.after(card);
    ranksFromOrder();
    card.focus();
  }

  // True when the ranking may be sent; otherwise says what is missing and focuses it.
  function rankingReady() {
    const allBad = allBadBox()?.checked;
    const missing = cards().filter((card) => !$(".rank-input", card).value);
    if (missing.length && !allBad) {
      page.showError(`Rank every response first (${missing.map((card) => card.dataset.letter).join(", ")} not ranked), or mark all bad.`);
      missing[0].focus();
      return false;
    }
    return true;
  }

  function submitRanking() {
    if (rankingReady()) page.send();
  }

  function toggleAllBad() {
    const box = allBadBox();
    if (!box) return;
    page.remember();
    box.checked = !box.checked;
    page.refresh();
  }

  return {
    keyedInputs: ".rank-input",

    setUp() {
      $$(".rank-input", page.item()).forEach((input) => {
        input.addEventListener("focus", () => page.remember());
        input.addEventListener("change", page.refresh);
      });
      // A click on Submit goes through the same checks as Enter before htmx sends anything, and is let through
      // (a second submit started from inside this submit would be ignored by the browser). Skip's own
      // htmx:confirm bubbles up to this form too: it must pass untouched, or Skip would submit the ranks.
      page.form()?.addEventListener("htmx:confirm", (event) => {
        const form = page.form();
        if (event.target !== form || form.dataset.sent) return;
        if (rankingReady()) page.stamp(form);
        else event.preventDefault();
      });
    },

    key(event, card) {
      const key = event.key;
      if (/^[1-9]$/.test(key)) { setRank(card || cards()[0], Number(key)); return true; }
      if (event.shiftKey && card && page.DOWN_KEYS.includes(key)) { moveCard(card, 1); return true; }
      if (event.shiftKey && card && page.UP_KEYS.includes(key)) { moveCard(card, -1); return true; }
      if (key === "Enter") { submitRanking(); return true; }
      if (key.toLowerCase() === "x") { toggleAllBad(); return true; }
      return false;
    },

    snapshot() {
      return {
        ranks: Object.fromEntries(cards().map((card) => [card.dataset.responseId, $(".rank-input", card)?.value || ""])),
        allBad: allBadBox()?.checked || false,
      };
    },

    restore(state) {
      cards().forEach((card) => {
        const input = $(".rank-input", card);
        if (input) input.value = state.ranks[card.dataset.responseId];
      });
      const allBad = allBadBox();
      if (allBad) allBad.checked = state.allBad;
    },

    refresh() {
      cards().forEach((card) => card.classList.toggle("ranked", Boolean($(".rank-input", card)?.value)));
    },

    dropped: ranksFromOrder,
  };
});
