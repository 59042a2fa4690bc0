// Site-wide behaviour. The CSRF token travels on every htmx request via hx-headers on <body>.
document.addEventListener("htmx:responseError", (event) => {
  const status = event.detail.xhr.status;
  const banner = document.getElementById("htmx-error") || Object.assign(document.createElement("div"), {
    id: "htmx-error",
    className: "messages error",
    role: "alert",
  });
  banner.textContent = `The server answered ${status}. ${status === 403 ? "You are not allowed to do that." : "Please retry."}`;
  document.querySelector("main")?.prepend(banner);
});

// A form with data-confirm asks first: the Content-Security-Policy refuses inline onsubmit handlers.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset?.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
