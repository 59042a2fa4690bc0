// The run page's status card is polled while the run is active. "Run #N queued." (the launch's message) is
// true only while the status says queued: it goes as soon as the status moves on, at load or at a poll.
(() => {
  "use strict";
  const status = document.getElementById("run-status");
  if (!status) return;

  function dropStaleQueuedMessage() {
    const current = status.querySelector("[data-status]")?.dataset.status;
    if (current === "queued") return;
    for (const message of document.querySelectorAll(".messages .run-queued")) {
      const list = message.parentElement;
      message.remove();
      if (!list.children.length) list.remove();
    }
  }

  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target === status) dropStaleQueuedMessage();
  });
  dropStaleQueuedMessage();
})();

// The samples' slider moves over the recorded steps: its request names the step its position points at
// (computed here, since the Content-Security-Policy refuses htmx's evaluated `hx-vals='js:…'`).
document.addEventListener("htmx:configRequest", (event) => {
  const slider = event.detail.elt;
  if (!slider.matches?.("input[data-steps]")) return;
  event.detail.parameters.step = JSON.parse(slider.dataset.steps)[slider.value];
});
