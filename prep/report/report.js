// Pagination and filtering for long lists (classes, samples, rejects, problems). Without
// script the page shows everything; with it, each `.paged` list shows `data-page` items at a time.
(function () {
  "use strict";
  function pager(list) {
    var size = parseInt(list.getAttribute("data-page"), 10) || 25;
    var items = Array.prototype.slice.call(list.querySelectorAll(":scope > .item, :scope > tbody > .item"));
    var state = { page: 0, shown: items };
    var bar = document.createElement("div");
    bar.className = "pager";
    var prev = document.createElement("button"), next = document.createElement("button"), text = document.createElement("span");
    prev.type = next.type = "button";
    prev.textContent = "previous"; next.textContent = "next";
    bar.appendChild(prev); bar.appendChild(text); bar.appendChild(next);
    list.parentNode.insertBefore(bar, list.nextSibling);
    function draw() {
      var pages = Math.max(1, Math.ceil(state.shown.length / size));
      state.page = Math.min(state.page, pages - 1);
      items.forEach(function (el) { el.classList.add("hidden"); });
      state.shown.slice(state.page * size, (state.page + 1) * size).forEach(function (el) { el.classList.remove("hidden"); });
      text.textContent = "page " + (state.page + 1) + " of " + pages + " (" + state.shown.length + " items)";
      prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
      bar.classList.toggle("hidden", items.length <= size);
    }
    prev.addEventListener("click", function () { state.page -= 1; draw(); });
    next.addEventListener("click", function () { state.page += 1; draw(); });
    state.filter = function (query) {
      query = query.toLowerCase();
      state.shown = items.filter(function (el) { return el.textContent.toLowerCase().indexOf(query) >= 0; });
      state.page = 0; draw();
    };
    draw();
    return state;
  }
  var pagers = {};
  document.querySelectorAll(".paged").forEach(function (list) {
    var state = pager(list);
    if (list.id) pagers[list.id] = state;
  });
  document.querySelectorAll("input.filter").forEach(function (input) {
    input.addEventListener("input", function () {
      var state = pagers[input.getAttribute("data-filter")];
      if (state) state.filter(input.value);
    });
  });
})();
