// Strom console: confirm and send clean-up actions (POST with the page's CSRF token).
"use strict";
(function () {
  const token = document.querySelector('meta[name="csrf-token"]').content;
  const result = document.getElementById("action-result");
  function show(ok, text) {
    result.className = ok ? "ok" : "error";
    result.textContent = text;
  }
  document.querySelectorAll("form.action").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!window.confirm(form.dataset.confirm || "Are you sure?")) {
        return;
      }
      const body = { confirm: "yes" };
      new FormData(form).forEach(function (value, key) { body[key] = value; });
      fetch(form.dataset.action, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": token },
        body: JSON.stringify(body),
      }).then(function (response) {
        return response.json().then(function (data) { return { ok: response.ok, data: data }; });
      }).then(function (answer) {
        if (answer.ok) {
          show(true, answer.data.message || "Done.");
        } else {
          show(false, (answer.data.error || "Error") + ": " + (answer.data.message || ""));
        }
      }).catch(function (err) {
        show(false, "Request failed: " + err);
      });
    });
  });
})();
