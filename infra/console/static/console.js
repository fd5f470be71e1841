// The console's one script: pointing at a shape of the case timeline highlights its row in the event
// list, and the other way round; a click on a short id copies the whole id; on the audit page, a
// running verification's progress is polled and shown. Everything else works without it (a short id
// still shows the whole id on hover; the audit page has a reload link).
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const shapes = document.querySelectorAll("svg.timeline [data-position]");
  const rowOf = (position) => document.getElementById("event-" + position);
  const mark = (position, on) => {
    const row = rowOf(position);
    if (row) row.classList.toggle("highlighted", on);
    document.querySelectorAll('svg.timeline [data-position="' + position + '"]')
      .forEach((shape) => shape.classList.toggle("highlighted", on));
  };
  shapes.forEach((shape) => {
    const position = shape.getAttribute("data-position");
    shape.addEventListener("mouseenter", () => mark(position, true));
    shape.addEventListener("mouseleave", () => mark(position, false));
  });
  document.querySelectorAll("table.events tr[data-position]").forEach((row) => {
    const position = row.getAttribute("data-position");
    row.addEventListener("mouseenter", () => mark(position, true));
    row.addEventListener("mouseleave", () => mark(position, false));
  });
  document.querySelectorAll("button.id[data-copy]").forEach((button) => {
    button.addEventListener("click", () => {
      const done = (state) => {
        button.setAttribute("data-copied", state);
        window.setTimeout(() => button.removeAttribute("data-copied"), 1500);
      };
      // No clipboard (a page not served over https or from localhost): select the whole id to copy by hand.
      if (!navigator.clipboard) {
        done("no");
        return;
      }
      navigator.clipboard.writeText(button.getAttribute("data-copy")).then(() => done("yes"), () => done("no"));
    });
  });
  const verification = document.getElementById("verification");
  if (verification && verification.getAttribute("data-state") === "running") {
    const poll = () => {
      fetch(verification.getAttribute("data-status-url"), { credentials: "same-origin" })
        .then((answer) => answer.json())
        .then((status) => {
          verification.setAttribute("data-state", status.state);
          const progress = verification.querySelector("progress");
          if (progress && status.total) {
            progress.max = status.total;
            progress.value = status.checked;
          }
          const set = (selector, text) => {
            const element = verification.querySelector(selector);
            if (element) element.textContent = text;
          };
          set(".outcome", status.outcome);
          set(".checked", status.checked + " of " + status.total);
          set(".summary", status.summary || "");
          if (status.state === "running") window.setTimeout(poll, 500);
        })
        .catch(() => verification.setAttribute("data-state", "unknown"));  // the reload link still works
    };
    window.setTimeout(poll, 300);
  }
});
