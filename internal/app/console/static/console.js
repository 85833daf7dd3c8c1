// Auto-refresh for pages that ask for it (body data-refresh="seconds"): reloads unless the
// checkbox is cleared. The pages work without it.
(function () {
  "use strict";
  // marks that the script ran under the CSP (the browser test looks for it)
  document.documentElement.classList.add("js");
  var secs = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!(secs > 0)) { return; }
  var box = document.getElementById("autorefresh");
  window.setTimeout(function () {
    if (!box || box.checked) { window.location.reload(); }
  }, secs * 1000);
})();
