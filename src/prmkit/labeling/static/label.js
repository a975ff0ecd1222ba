// Maths rendering and keyboard shortcuts for the labelling pages (no build step).
(function () {
  "use strict";
  function renderMath() {
    if (window.renderMathInElement) {
      document.querySelectorAll(".math").forEach(function (el) {
        window.renderMathInElement(el, {
          delimiters: [
            { left: "$$", right: "$$", display: true },
            { left: "\\[", right: "\\]", display: true },
            { left: "$", right: "$", display: false },
            { left: "\\(", right: "\\)", display: false },
          ],
          throwOnError: false,
        });
      });
    }
  }

  var active = 0;
  function candidates() { return Array.prototype.slice.call(document.querySelectorAll("fieldset.candidate")); }
  function rating(fs) {
    var checked = fs.querySelector("input[type=radio]:checked");
    return checked ? checked.value : null;
  }
  function paint() {
    candidates().forEach(function (fs, i) {
      var r = rating(fs);
      fs.classList.toggle("active", i === active);
      fs.classList.toggle("rated-1", r === "1");
      fs.classList.toggle("rated0", r === "0");
      fs.classList.toggle("rated-neg", r === "-1");
    });
    var human = document.getElementById("human-text");
    if (human) {
      var all = candidates().every(function (fs) { return rating(fs) === "-1"; });
      human.disabled = !all;
    }
  }
  function rate(value) {
    var list = candidates();
    if (!list.length) return;
    var input = list[active].querySelector("input[type=radio][value='" + value + "']");
    input.checked = true;
    var next = list.findIndex(function (fs, i) { return i > active && rating(fs) === null; });
    if (next < 0) next = list.findIndex(function (fs) { return rating(fs) === null; });
    if (next >= 0) active = next;
    paint();
  }
  function submitStep() {
    var form = document.getElementById("step-form");
    if (!form) return;
    var missing = candidates().findIndex(function (fs) { return rating(fs) === null; });
    if (missing >= 0) { active = missing; paint(); return; }
    form.requestSubmit();
  }
  function finish(reason) {
    var radio = document.getElementById("reason-" + reason);
    if (!radio) return;
    radio.checked = true;
    if (reason === "bad_problem" || reason === "give_up") {
      document.getElementById("finish-note").focus();
    } else {
      document.getElementById("finish-form").requestSubmit();
    }
  }

  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (t && (t.tagName === "TEXTAREA" || (t.tagName === "INPUT" && t.type !== "radio" && t.type !== "checkbox"))) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    var list = candidates();
    var key = ev.key.toLowerCase();
    var actions = {
      "1": function () { rate("1"); }, "+": function () { rate("1"); },
      "2": function () { rate("0"); }, "0": function () { rate("0"); },
      "3": function () { rate("-1"); }, "-": function () { rate("-1"); },
      "j": function () { active = Math.min(active + 1, list.length - 1); paint(); },
      "arrowdown": function () { active = Math.min(active + 1, list.length - 1); paint(); },
      "k": function () { active = Math.max(active - 1, 0); paint(); },
      "arrowup": function () { active = Math.max(active - 1, 0); paint(); },
      "f": function () { if (list.length) { var c = list[active].querySelector("input[type=checkbox]"); c.checked = !c.checked; } },
      "w": function () { var h = document.getElementById("human-text"); if (h && !h.disabled) h.focus(); },
      "enter": submitStep,
      "s": function () { finish("solution"); },
      "e": function () { finish("found_error"); },
      "b": function () { finish("bad_problem"); },
      "g": function () { finish("give_up"); },
      "u": function () { var u = document.getElementById("undo-form"); if (u) u.requestSubmit(); },
      "n": function () { var b = document.getElementById("next-task"); if (b) b.click(); },
    };
    if (actions[key]) { ev.preventDefault(); actions[key](); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    renderMath();
    document.querySelectorAll("fieldset.candidate input").forEach(function (el) {
      el.addEventListener("change", paint);
    });
    // One submission per form: a second click or key press is ignored.
    document.querySelectorAll("form").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        if (form.dataset.sent) { ev.preventDefault(); return; }
        form.dataset.sent = "1";
      });
    });
    paint();
  });
})();
