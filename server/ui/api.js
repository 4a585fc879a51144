// The dashboard's door to kolo-server: JSON requests with the bearer token (asked once, kept
// in this tab's sessionStorage) and a server-sent event stream read over fetch (EventSource
// cannot send an Authorization header), reconnecting after a break. Same origin only, so the
// page follows the server's TLS as it was loaded.

const TOKEN_KEY = "kolo-token";
let asking = null; // the token dialog's promise while it is open

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  const t = token();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}

// Shows the token dialog once for everyone waiting; resolves when a token was entered.
function askToken(refused) {
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-error").hidden = !refused;
  input.value = "";
  asking = new Promise((resolve) => {
    const form = document.getElementById("token-form");
    const done = (ev) => {
      ev.preventDefault();
      const value = input.value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      form.removeEventListener("submit", done);
      dialog.close();
      asking = null;
      resolve();
    };
    form.addEventListener("submit", done);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// One JSON request; a 401 asks for the token and tries again.
export async function request(method, path, body) {
  for (let attempt = 0; ; attempt++) {
    const init = { method, headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}) };
    if (body !== undefined) init.body = JSON.stringify(body);
    const resp = await fetch(path, init);
    if (resp.status === 401 && attempt < 5) {
      await askToken(attempt > 0 || token() !== "");
      continue;
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = { text };
    }
    if (!resp.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(resp.status, err.code || String(resp.status), err.message || resp.statusText);
    }
    return data;
  }
}

// Reads a text answer as it arrives (GET path): onChunk(text) per piece; a 401 asks for the
// token and tries again. Resolves with the HTTP status when the answer ends.
export async function follow(path, onChunk, signal) {
  for (let attempt = 0; ; attempt++) {
    const resp = await fetch(path, { headers: headers(), signal });
    if (resp.status === 401 && attempt < 5) {
      await askToken(attempt > 0 || token() !== "");
      continue;
    }
    if (!resp.ok) {
      let err = {};
      try {
        err = (await resp.json()).error || {};
      } catch (e) {
        err = {};
      }
      throw new ApiError(resp.status, err.code || String(resp.status), err.message || resp.statusText);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      onChunk(decoder.decode(value, { stream: true }));
    }
    return resp.status;
  }
}

// Parses server-sent events out of a text stream; calls onEvent(name, data).
function sseParser(onEvent) {
  let buffer = "";
  return (chunk) => {
    buffer += chunk;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  };
}

// Follows GET /v1/stream?query: handlers[name](parsed JSON) per event; onState("live" |
// "reconnecting" | "ended"). Returns a function that stops it.
export function stream(query, handlers, onState) {
  let stopped = false;
  let controller = null;
  let delay = 500;
  const state = (s) => onState && onState(s);
  async function once() {
    controller = new AbortController();
    const resp = await fetch("/v1/stream?" + query, { headers: headers(), signal: controller.signal });
    if (resp.status === 401) {
      await askToken(token() !== "");
      return;
    }
    if (!resp.ok || !resp.body) throw new Error("stream: HTTP " + resp.status);
    state("live");
    delay = 500;
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    const feed = sseParser((name, data) => {
      const fn = handlers[name];
      if (!fn) return;
      try {
        fn(JSON.parse(data));
      } catch (e) {
        console.error("stream event", name, e);
      }
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      feed(decoder.decode(value, { stream: true }));
    }
  }
  (async () => {
    while (!stopped) {
      try {
        await once();
      } catch (e) {
        if (stopped) break;
      }
      if (stopped) break;
      state("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10000);
    }
    state("ended");
  })();
  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}
