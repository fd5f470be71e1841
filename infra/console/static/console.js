// The console's one script: pointing at a shape of the case timeline highlights its row in the event
// list, and the other way round. Everything else works without it.
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
});
