// The ranking mode's controls and keys: 1-9 rank the focused response, Shift+arrows (or a drag) move it up or down
// the ranking typed so far, Enter submits, X marks all bad. Registered with static/annotation/annotate.js, which is
// loaded first.
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

  // The ranking as it is typed, as tiers of cards, best first: equal ranks together (a tie), then the unranked
  // cards one by one in page order. `without`: a card left out (the one being moved).
  function tiersByRank(without) {
    const byRank = new Map();
    const unranked = [];
    cards().filter((card) => card !== without).forEach((card) => {
      const rank = Number($(".rank-input", card)?.value);
      if (Number.isInteger(rank) && rank > 0) byRank.set(rank, [...(byRank.get(rank) || []), card]);
      else unranked.push(card);
    });
    const ranked = [...byRank.keys()].sort((a, b) => a - b).map((rank) => byRank.get(rank));
    return [...ranked, ...unranked.map((card) => [card])];
  }

  // Each tier gets its rank (1 best) and the responses are shown in that order, so the page's order is the
  // ranking's from then on and the next move or drag means what it shows.
  function applyTiers(tiers, moved) {
    const container = $("#responses", page.item());
    tiers.flat().forEach((card) => container.appendChild(card));
    tiers.forEach((tier, index) => tier.forEach((card) => {
      const input = $(".rank-input", card);
      if (input) input.value = String(index + 1);
    }));
    page.refresh();
    moved.focus();
  }

  // Shift+↑/↓: one step up or down the ranking; a tied response leaves its tie to just above or below it. The
  // other responses keep their ranks and ties.
  function moveCard(card, offset) {
    const tiers = tiersByRank();
    const at = tiers.findIndex((tier) => tier.includes(card));
    let to;
    if (tiers[at].length > 1) {
      tiers[at] = tiers[at].filter((other) => other !== card);
      to = offset < 0 ? at : at + 1;
    } else {
      tiers.splice(at, 1);
      to = at + offset;
      if (to < 0 || to > tiers.length) return; // first or last already
    }
    page.remember();
    tiers.splice(to, 0, [card]);
    applyTiers(tiers, card);
  }

  // After a drag (page.remember was called when it started): the response takes the place in the ranking that it
  // has on the page, below as many responses as it was dropped under; the others keep their ranks and ties.
  function dropped(card) {
    const above = cards().indexOf(card);
    const tiers = tiersByRank(card);
    let to = 0;
    for (let count = 0; to < tiers.length && count < above; to += 1) count += tiers[to].length;
    tiers.splice(to, 0, [card]);
    applyTiers(tiers, card);
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

    dropped,
  };
});
