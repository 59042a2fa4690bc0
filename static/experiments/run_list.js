// The run table is replaced every few seconds (and on each change of filters). The compare boxes ticked by the
// user live here, not in the table, so a swap ticks them again; a ticked run filtered out of sight stays chosen
// and is sent with "Compare selected".
(() => {
  "use strict";
  const form = document.getElementById("run-compare");
  const rows = document.getElementById("run-rows");
  if (!form || !rows) return;
  const chosen = new Set([...form.querySelectorAll("input[name=runs]:checked")].map((box) => box.value));
  const count = document.getElementById("compare-chosen");

  function showChosen() {
    for (const box of rows.querySelectorAll("input[name=runs]")) box.checked = chosen.has(box.value);
    count.textContent = chosen.size ? `${chosen.size} run${chosen.size === 1 ? "" : "s"} chosen` : "";
  }

  form.addEventListener("change", (event) => {
    const box = event.target;
    if (box.name !== "runs") return;
    if (box.checked) chosen.add(box.value);
    else chosen.delete(box.value);
    showChosen();
  });
  // the swap event reaches the document whichever element (the table's poll or the filter form) asked
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target === rows) showChosen();
  });
  form.addEventListener("submit", () => {
    const shown = new Set([...rows.querySelectorAll("input[name=runs]")].map((box) => box.value));
    for (const id of chosen) {
      if (shown.has(id)) continue;
      form.append(Object.assign(document.createElement("input"), { type: "hidden", name: "runs", value: id }));
    }
  });
})();
