// Live parts: every element with data-live and an id is fetched again every two seconds
// (the same page, parsed here) and swapped in place -- no full reload. Paused while the
// tab is hidden or while a form inside the part has focus.
(function () {
  "use strict";
  var EVERY = 2000;
  function refresh() {
    if (document.hidden) { return; }
    var live = document.querySelectorAll("[data-live][id]");
    if (!live.length) { return; }
    var banner = document.getElementById("unavailable");
    fetch(window.location.href, { headers: { "X-Archiver-Live": "1" }, credentials: "same-origin" })
      .then(function (r) {
        // the database away: say so above the page (its last figures stay), until it is back
        if (r.status === 503 && banner) {
          r.text().then(function (html) {
            var said = new DOMParser().parseFromString(html, "text/html").getElementById("error-detail");
            banner.textContent = said ? said.textContent : "database unavailable";
            banner.hidden = false;
          });
          return null;
        }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (!html) { return; }
        if (banner) { banner.hidden = true; }
        var fresh = new DOMParser().parseFromString(html, "text/html");
        live.forEach(function (el) {
          if (el.contains(document.activeElement) && document.activeElement !== document.body) { return; }
          var next = fresh.getElementById(el.id);
          if (next) { el.innerHTML = next.innerHTML; }
        });
        document.documentElement.dataset.refreshed = String(Date.now());
      })
      .catch(function () { /* the next tick tries again */ });
  }
  setInterval(refresh, EVERY);
  document.addEventListener("visibilitychange", refresh);
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.classList.contains("danger") && button.dataset.action !== "confirm") {
      if (!window.confirm(button.textContent.trim() + "?")) { event.preventDefault(); }
    }
  });
})();
