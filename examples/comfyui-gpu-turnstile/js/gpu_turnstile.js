// GPU turnstile: says in the ComfyUI frontend why this tab's queued prompt
// waits for the GPU, and for about how long.
//
// It follows the turnstile's event stream (a gpu_turnstile_status route on
// the same Caddy site as ComfyUI, /healthz by default) and looks for this
// tab's prompt among the waiters: an image waiter's "client" is the first
// 16 hex digits of the SHA-256 of the client_id its prompt was queued with,
// which is this tab's api.clientId. While it is listed, a small banner at
// the top says why it waits; otherwise the extension shows nothing.

import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const SETTING = "GPUTurnstile.StatusPath";
const DEFAULT_PATH = "/healthz";
const BANNER = "gpu-turnstile-banner";

// What this tab's prompt waits for (its waiter's "waiting_for", else the
// turnstile's state), as the banner says it.
const REASONS = {
  job: "another image job",
  image: "another image job",
  hold: "a hold",
  llm: "chats on the GPU to finish",
  vram: "room in video memory",
  vram_reading: "a reading of video memory",
  presence: "a program that uses the GPU",
  unload: "the LLM engine to unload its models",
  free: "the image engine to free its memory",
  wake: "the engine to wake",
};

// What the extension has seen, for whoever wants to know (its tests).
// last is the last status received, rendered the last one the banner
// shows (or hides for).
export const seen = { statuses: 0, last: null, rendered: null, hash: null };

let latest = null; // the last status, or null while the stream is down
let ticker = 0; // the banner's countdown while it shows
let hashed = { id: null, hash: null }; // this tab's client id, hashed

app.registerExtension({
  name: "gpu_turnstile.status",
  settings: [
    {
      id: SETTING,
      name: "GPU turnstile: status route on this site",
      type: "text",
      defaultValue: DEFAULT_PATH,
      tooltip: "The path of the turnstile's gpu_turnstile_status handler on the site that serves ComfyUI.",
    },
  ],
  setup() {
    follow();
  },
});

// follow opens the event stream; EventSource reconnects by itself after a
// dropped connection, and gives up on a route that is not there (quiet).
function follow() {
  if (typeof EventSource === "undefined") return;
  const events = new EventSource(statusURL());
  events.addEventListener("status", (e) => {
    try {
      latest = JSON.parse(e.data);
    } catch {
      return;
    }
    seen.statuses++;
    seen.last = latest;
    render();
  });
  events.addEventListener("error", () => {
    latest = null;
    render();
  });
}

function statusURL() {
  let path = DEFAULT_PATH;
  try {
    path = app.extensionManager?.setting?.get?.(SETTING) ?? app.ui?.settings?.getSettingValue?.(SETTING) ?? DEFAULT_PATH;
  } catch {
    // an older frontend without settings: the default
  }
  if (/^https?:\/\//.test(path)) return path;
  return (api.api_base ?? "") + (path.startsWith("/") ? path : "/" + path);
}

// render shows or hides the banner for the latest status. The hash is
// computed for the tab's client id as it is now: the frontend sets it
// once its websocket is open, and again if it changes.
async function render() {
  const status = latest;
  const id = api.clientId ?? api.initialClientId ?? null;
  if (id !== hashed.id) hashed = { id, hash: id ? await clientHash(id) : null };
  const hash = hashed.hash;
  seen.hash = hash;
  if (status !== latest) return; // a newer status renders itself
  show(status && hash ? describe(status, hash, Date.now()) : null);
  seen.rendered = status;
}

// describe is the banner's text for this tab's waiting prompt in status,
// or null when none of the waiters is its.
export function describe(status, hash, now) {
  const waiters = status.waiters ?? [];
  const mine = waiters.find((w) => w.kind === "image" && w.client === hash);
  if (!mine) return null;
  const what = mine.waiting_for || status.state || "";
  let reason = REASONS[what] ?? "its turn";
  if (what === "hold") {
    const owner = (status.holds ?? []).map((h) => h.owner).find(Boolean);
    if (owner) reason += ` (${owner})`;
  }
  const sameKind = waiters.filter((w) => w.kind === "image");
  const position = mine.position > 0 ? mine.position : sameKind.indexOf(mine) + 1;
  let text = `Your prompt waits for the GPU: ${reason}, ${ordinal(position)} in line`;
  const start = Date.parse(mine.expected_start ?? "");
  if (!Number.isNaN(start)) {
    const left = Math.max(1, Math.round((start - now) / 1000));
    text += left < 90 ? `, about ${left} s` : `, about ${Math.round(left / 60)} min`;
  } else {
    const since = Date.parse(mine.since ?? "");
    if (!Number.isNaN(since)) text += ` (waiting ${Math.max(0, Math.round((now - since) / 1000))} s)`;
  }
  return text;
}

function ordinal(n) {
  const s = n % 100 >= 10 && n % 100 <= 20 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th";
  return `${n}${s}`;
}

// show puts text in the banner, or removes the banner for null.
function show(text) {
  let el = document.getElementById(BANNER);
  if (text === null) {
    el?.remove();
    clearInterval(ticker);
    ticker = 0;
    return;
  }
  if (!el) {
    el = document.createElement("div");
    el.id = BANNER;
    el.setAttribute("role", "status");
    el.setAttribute("aria-live", "polite");
    Object.assign(el.style, {
      position: "fixed",
      top: "8px",
      left: "50%",
      transform: "translateX(-50%)",
      zIndex: "10000",
      padding: "6px 14px",
      borderRadius: "6px",
      background: "#3a3320",
      color: "#ffe9a8",
      border: "1px solid #8a7330",
      font: "13px sans-serif",
      pointerEvents: "none",
    });
    document.body.appendChild(el);
  }
  el.textContent = text;
  if (!ticker) ticker = setInterval(render, 1000); // the countdown
}

// clientHash is what the turnstile shows of a client_id: the first 16 hex
// digits of its SHA-256. crypto.subtle exists only in secure contexts
// (https, localhost); ComfyUI on a LAN address over plain http has none,
// and then the small implementation below computes the same.
export async function clientHash(id) {
  if (globalThis.crypto?.subtle) {
    const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(id));
    return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("").slice(0, 16);
  }
  return sha256Hex(id).slice(0, 16);
}

const rotr = (x, n) => (x >>> n) | (x << (32 - n));

// The round constants: the first 32 bits of the fractional parts of the
// cube roots of the first 64 primes.
const K = (() => {
  const k = new Uint32Array(64);
  for (let n = 2, i = 0; i < 64; n++) {
    let prime = true;
    for (let d = 2; d * d <= n; d++) if (n % d === 0) prime = false;
    if (prime) k[i++] = ((Math.cbrt(n) % 1) * 2 ** 32) >>> 0;
  }
  return k;
})();

// sha256Hex is the SHA-256 of text's UTF-8 bytes, in hex (FIPS 180-4).
export function sha256Hex(text) {
  const bytes = new TextEncoder().encode(text);
  const size = (((bytes.length + 8) >> 6) + 1) << 6; // the message, 0x80 and its bit length, in 64-byte blocks
  const m = new Uint8Array(size);
  m.set(bytes);
  m[bytes.length] = 0x80;
  const view = new DataView(m.buffer);
  view.setUint32(size - 8, Math.floor(bytes.length / 2 ** 29));
  view.setUint32(size - 4, (bytes.length * 8) >>> 0);
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  for (let off = 0; off < size; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(off + 4 * i);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    let [a, b, c, d, e, f, g, k] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
  }
  return Array.from(h, (x) => x.toString(16).padStart(8, "0")).join("");
}
