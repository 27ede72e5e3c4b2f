// Formatting of the API's values for people: counts, times with their
// zone (the viewer's, or a schedule's; the exact time for a title),
// durations, payloads.
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";

/** ms is a Timestamp in milliseconds since the epoch. */
export function ms(ts: Timestamp | undefined): number | undefined {
  if (!ts) {
    return undefined;
  }
  return Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6);
}

/** durationMs is a Duration in milliseconds. */
export function durationMs(d: Duration | undefined): number | undefined {
  if (!d) {
    return undefined;
  }
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6);
}

/** count writes a number with the viewer's digit grouping. */
export function count(n: bigint | number | undefined): string {
  return (n ?? 0).toLocaleString();
}

/**
 * exact is a time to the millisecond with its offset, in the viewer's
 * zone: what a title shows on hover.
 */
export function exact(t: number): string {
  const d = new Date(t);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  const off = -d.getTimezoneOffset();
  const sign = off >= 0 ? "+" : "-";
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)} ` +
    `${sign}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)} (${zone})`;
}

/**
 * short is a time in the viewer's locale, to the second, with its zone
 * ("12/2/26, 2:00:00 AM GMT+1"): in the viewer's zone, or in zone (an
 * IANA name) if given.
 */
export function short(t: number, zone?: string): string {
  return new Date(t).toLocaleString(undefined, { dateStyle: "short", timeStyle: "long", timeZone: zone });
}

/** clock is the time of day in the viewer's zone, to the second, with the zone. */
export function clock(t: number): string {
  return new Date(t).toLocaleTimeString(undefined, { timeStyle: "long" });
}

/** span writes a duration in milliseconds compactly: 850 ms, 12.3 s, 4 m 05 s, 3 h 02 m, 2 d 04 h. */
export function span(d: number): string {
  if (d < 1000) {
    return `${Math.round(d)} ms`;
  }
  const s = d / 1000;
  if (s < 60) {
    return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  }
  const hr = Math.floor(m / 60);
  if (hr < 48) {
    return `${hr} h ${String(m % 60).padStart(2, "0")} m`;
  }
  return `${Math.floor(hr / 24)} d ${String(hr % 24).padStart(2, "0")} h`;
}

/** How a payload or result is shown. */
export type BytesView = "text" | "json" | "hex";

/**
 * bestView is the view a payload is shown in first: pretty JSON if it is
 * JSON, text if it is UTF-8 without control characters (but newlines and
 * tabs), hex otherwise.
 */
export function bestView(b: Uint8Array): BytesView {
  const text = utf8(b);
  if (text === undefined) {
    return "hex";
  }
  if (text.trim() !== "") {
    try {
      JSON.parse(text);
      return "json";
    } catch {
      // not JSON
    }
  }
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text) ? "hex" : "text";
}

/** utf8 decodes b, or undefined if it is not valid UTF-8. */
export function utf8(b: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(b);
  } catch {
    return undefined;
  }
}

/**
 * showBytes renders b in view: text as is, JSON indented by two spaces, or
 * a hex dump of 16 bytes a line with their printable ASCII. A view that
 * does not fit (JSON that does not parse) falls back to text or hex, and
 * says so in the note.
 */
export function showBytes(b: Uint8Array, view: BytesView): { text: string; note?: string } {
  const text = utf8(b);
  if (view === "json") {
    if (text !== undefined) {
      try {
        return { text: JSON.stringify(JSON.parse(text), null, 2) };
      } catch {
        return { text, note: "not JSON: shown as text" };
      }
    }
    return { text: hexDump(b), note: "not UTF-8: shown as hex" };
  }
  if (view === "text") {
    if (text !== undefined) {
      return { text };
    }
    return { text: hexDump(b), note: "not UTF-8: shown as hex" };
  }
  return { text: hexDump(b) };
}

/** hexDump is offset, 16 bytes in hex, and their printable ASCII, a line each. */
export function hexDump(b: Uint8Array): string {
  const lines: string[] = [];
  for (let off = 0; off < b.length; off += 16) {
    const row = b.subarray(off, off + 16);
    const hex = Array.from(row, (x) => x.toString(16).padStart(2, "0")).join(" ");
    const ascii = Array.from(row, (x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : ".")).join("");
    lines.push(`${off.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join("\n");
}
