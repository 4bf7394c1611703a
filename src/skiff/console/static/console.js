// skiff console: the little that needs a script. Every page works without it (forms post,
// pages reload); with it, lists refresh by themselves, the request panel watches its job,
// logs follow, risky buttons say what they will do before they do it, and copy buttons copy.
// A pod's terminal has a script of its own (terminal.js).
"use strict";

function $(selector, root) { return (root || document).querySelector(selector); }
function $$(selector, root) { return Array.from((root || document).querySelectorAll(selector)); }
function show(el, on) { if (el) el.hidden = !on; }

// Regions that refresh themselves: <div data-live="URL" data-every="ms">. A region the
// keyboard focus is in is left alone (replacing it would throw the focus away).
function live(region) {
  const every = Number(region.dataset.every || 3000);
  const timer = setInterval(async () => {
    if (document.hidden || region.contains(document.activeElement)) return;
    let response;
    try { response = await fetch(region.dataset.live, { headers: { Accept: "text/html" } }); }
    catch (e) { return; }
    if (response.status === 401) { location.reload(); return; }
    if (!response.ok) return;
    region.innerHTML = await response.text();
    if ($("[data-final]", region)) clearInterval(timer);
  }, every);
}

// The request panel: send the job, then watch it until it is final, showing stream chunks.
function requestPanel(form) {
  const result = $("[data-result]");
  const error = $("#e-body");
  const body = $("#f-body");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    show(error, false); body.removeAttribute("aria-invalid");
    const response = await fetch(form.action, {
      method: "POST", body: new FormData(form), headers: { Accept: "application/json" },
    });
    const answer = await response.json();
    if (!response.ok) {
      error.textContent = answer.error; show(error, true);
      body.setAttribute("aria-invalid", "true"); body.focus();
      return;
    }
    const link = $("[data-job-link]", result);
    link.textContent = answer.id;
    link.href = form.dataset.watch + encodeURIComponent(answer.id);
    $("[data-stream-text]", result).textContent = "";
    for (const part of ["[data-job-stream]", "[data-job-output]", "[data-job-error]"]) show($(part, result), false);
    show(result, true);
    watch(form.dataset.watch + encodeURIComponent(answer.id) + "/watch.json", result);
  });
}

async function watch(url, result) {
  const status = $("[data-job-status]", result);
  let after = 0;  // the last chunk shown: the page reads the stream without taking it
  for (;;) {
    let view;
    try {
      const response = await fetch(url + "?after=" + after, { headers: { Accept: "application/json" } });
      view = await response.json();
      if (!response.ok) { status.textContent = view.error || "gone"; return; }
    } catch (e) { await new Promise((r) => setTimeout(r, 1000)); continue; }
    status.textContent = view.status;
    status.className = "state state-" + view.status.toLowerCase();
    const times = ["waited " + view.delayTime + " ms"];
    if (view.executionTime !== undefined) times.push("ran " + view.executionTime + " ms");
    $("[data-job-times]", result).textContent = "(" + times.join(", ") + ")";
    after = view.next;
    if (view.stream.length) {
      const text = $("[data-stream-text]", result);
      for (const chunk of view.stream) text.textContent += JSON.stringify(chunk.output) + "\n";
      show($("[data-job-stream]", result), true);
    }
    if (view.final) {
      if (view.output !== undefined) {
        $("[data-output-text]", result).textContent = JSON.stringify(view.output, null, 2);
        show($("[data-job-output]", result), true);
      }
      if (view.error !== undefined) {
        $("[data-error-text]", result).textContent = view.error;
        show($("[data-job-error]", result), true);
      }
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

// The edit form says, before saving, when the change restarts the endpoint's workers.
function rollingForm(form) {
  const fields = $$("[data-rolls]", form);
  const notice = $("#restart-notice", form);
  const ok = $("[data-restart-ok]", form);
  const confirmed = ok.value;
  const update = () => {
    // Compared with what is saved (not with what the form came back with after an error).
    const changed = fields.filter((f) => f.value.trim() !== f.dataset.stored.trim())
      .map((f) => f.dataset.rolls);
    if (changed.length) {
      notice.textContent = "Saving restarts this endpoint's workers (you changed: " + changed.join(", ") +
        "). Running jobs finish on the old workers; new ones start with the new settings.";
    }
    show(notice, changed.length > 0);
    ok.value = changed.length ? "yes" : confirmed;
  };
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
}

// "Create a new template…" shows the new template's fields; any other choice hides them.
function templateChoice(select) {
  const part = $("#new-template");
  const update = () => show(part, select.value === select.dataset.newTemplate);
  select.addEventListener("change", update);
  update();
}

// Delete only once the exact name is typed.
function confirmName(form) {
  const input = $("#f-confirm_name", form);
  const button = $("button[type=submit]", form);
  const update = () => { button.disabled = input.value !== form.dataset.confirmName; };
  input.addEventListener("input", update);
  update();
}

// Follow a log: ask for the lines since the last one shown, once a second.
function follow(box) {
  const log = $("[data-log]");
  const empty = $("[data-log-empty]");
  let timer = null;
  const seen = new Set($$(".line", log).map((l) => l.dataset.key));
  const poll = async () => {
    const times = $$(".line", log).map((l) => Number(l.dataset.time)).filter((t) => t > 0);
    const since = times.length ? Math.max(...times) : 0;
    let response;
    try { response = await fetch(box.dataset.url + "&since=" + since); } catch (e) { return; }
    if (response.status === 401) { location.reload(); return; }
    if (!response.ok) return;
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    for (const l of (await response.json()).lines) {
      const key = l.worker + "|" + l.time + "|" + l.line;
      if (seen.has(key)) continue;
      seen.add(key);
      const row = document.createElement("div");
      row.className = "line"; row.dataset.key = key; row.dataset.time = l.time === null ? "" : l.time;
      for (const [cls, text] of [["t", l.stamp], ["w", l.worker], ["x", l.line]]) {
        const span = document.createElement("span"); span.className = cls; span.textContent = text;
        row.append(span, " ");
      }
      log.append(row);
      show(empty, false);
    }
    if (atEnd) log.scrollTop = log.scrollHeight;
  };
  box.addEventListener("change", () => {
    clearInterval(timer);
    if (box.checked) { poll(); timer = setInterval(poll, 1000); }
  });
}

// Copy buttons (hidden without a script): the text of the <code> just before them.
function copyButton(button) {
  const source = button.previousElementSibling;
  button.hidden = false;
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(source.textContent); // HTTPS and localhost only
    } catch (e) {
      const range = document.createRange();
      range.selectNodeContents(source);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      document.execCommand("copy");
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  $$("button[data-copy]").forEach(copyButton);
  $$("[data-live]").forEach(live);
  $$("form[data-request-panel]").forEach(requestPanel);
  $$("form[data-rolling-form]").forEach(rollingForm);
  $$("select[data-new-template]").forEach(templateChoice);
  $$("form[data-confirm-name]").forEach(confirmName);
  $$("[data-follow]").forEach(follow);
  $$("form[data-confirm]").forEach((form) => form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  }));
  const log = $("[data-log]");
  if (log) log.scrollTop = log.scrollHeight;
});
