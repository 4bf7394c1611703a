// skiff console: a pod's terminal (templates/terminal.html). xterm.js draws it; a WebSocket
// carries what is typed in and the output out as binary frames. Text frames are JSON:
// {"resize": [cols, rows]} from here, {"error": why} or {"ended": how, "exit": code} from the
// server (console/terminal_protocol.py).
"use strict";

(function () {
  const box = document.querySelector("[data-terminal]");
  if (!box) return;
  const status = document.querySelector("[data-terminal-status]");

  // xterm.js adds <style> elements as it draws (colours, cell sizes); the page's
  // Content-Security-Policy takes only those that carry its nonce, so each gets it.
  const nonce = box.dataset.styleNonce;
  const create = document.createElement.bind(document);
  document.createElement = function (name, options) {
    const element = create(name, options);
    if (String(name).toLowerCase() === "style") element.setAttribute("nonce", nonce);
    return element;
  };

  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace',
    fontSize: 14,
    scrollback: 5000,
    theme: { background: "#0f1720", foreground: "#e6edf3" },
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();

  // Codes of the server's refusals (terminal_protocol.py), said in words when its own text
  // frame did not come.
  const REFUSALS = {
    1008: "Refused: this page is not the console's own (its Origin).",
    4401: "Signed out: sign in again, then reload this page.",
    4403: "Refused: this session may not write pods.",
    4404: "There is no such pod of yours.",
    4409: "The pod does not run: start it, then reload this page.",
  };
  let over = false;
  const say = (text, bad) => {
    status.textContent = text;
    status.classList.toggle("bad", Boolean(bad));
  };
  const finish = (text, bad) => {
    if (over) return;
    over = true;
    say(text, bad);
    term.options.disableStdin = true;
    term.options.cursorBlink = false;
    // Dimmed, and the cursor hidden: nothing typed goes anywhere now.
    term.write("\r\n\x1b[2m[" + text + "]\x1b[0m\r\n\x1b[?25l");
    const again = document.createElement("a");
    again.href = location.pathname;
    again.textContent = "Open a new session";
    status.append(" ", again);
  };

  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(
    scheme + "//" + location.host + box.dataset.socket + "?cols=" + term.cols + "&rows=" + term.rows,
  );
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  const send = (data) => { if (socket.readyState === WebSocket.OPEN && !over) socket.send(data); };

  socket.addEventListener("open", () => { say("Connected."); term.focus(); });
  socket.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      term.write(new Uint8Array(event.data)); // UTF-8 split across frames is joined by xterm.js
      return;
    }
    let message;
    try { message = JSON.parse(event.data); } catch (e) { return; }
    if (message.ended !== undefined) finish("Session ended: " + message.ended, false);
    else if (message.error !== undefined) finish(message.error, true);
  });
  socket.addEventListener("close", (event) => {
    finish(REFUSALS[event.code] || event.reason || "The connection was lost (code " + event.code + ").", true);
  });

  term.onData((data) => send(encoder.encode(data)));
  // Bytes that are not text (some mouse reports): one byte per character.
  term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  term.onResize(({ cols, rows }) => send(JSON.stringify({ resize: [cols, rows] })));
  // The box follows the window (its CSS); the terminal follows the box.
  new ResizeObserver(() => { if (!over) fit.fit(); }).observe(box);

  // Ctrl+C and Ctrl+V belong to the shell (interrupt, quoted insert), as on any terminal:
  // Ctrl+Shift+C copies the selection and Ctrl+Shift+V lets the browser paste (a paste event,
  // which xterm.js sends on as typed). The browser's own copy and paste work too.
  term.attachCustomKeyEventHandler((event) => {
    if (event.type !== "keydown" || !event.ctrlKey || !event.shiftKey) return true;
    if (event.code === "KeyC") {
      event.preventDefault();
      if (term.hasSelection()) copy(term.getSelection());
      return false;
    }
    return event.code !== "KeyV";
  });

  function copy(text) {
    // The clipboard API needs a secure context (HTTPS, localhost); elsewhere the copy command
    // raises a copy event, which xterm.js fills with its selection.
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).catch(() => document.execCommand("copy"));
    } else {
      document.execCommand("copy");
    }
  }
})();
