// Server-sent events over fetch(): EventSource cannot POST or send an Authorization header.

/** Incremental SSE parser: push() decoded text as it arrives, get back complete events' data. */
export class SSEParser {
  constructor() { this.buf = ""; this.data = []; }

  /** @returns {string[]} the data of every event completed by this piece of text */
  push(text) {
    this.buf += text;
    const out = [];
    let nl;
    while ((nl = this.buf.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buf.slice(0, nl);
      const sep = this.buf.startsWith("\r\n", nl) ? 2 : 1;
      if (sep === 1 && this.buf[nl] === "\r" && nl === this.buf.length - 1) break; // maybe half of \r\n
      this.buf = this.buf.slice(nl + sep);
      if (line === "") {                       // blank line: dispatch
        if (this.data.length) out.push(this.data.join("\n"));
        this.data = [];
      } else if (line.startsWith("data:")) {
        this.data.push(line.slice(line[5] === " " ? 6 : 5));
      }                                        // comments (":") and other fields are ignored
    }
    return out;
  }

  /** Call at end of stream: an event not followed by a blank line still counts. */
  end() {
    const rest = this.push("\n\n");
    this.buf = "";
    return rest;
  }
}

/** Read an SSE response body, calling onData(string) for each event; resolves at end of stream. */
export async function readSSE(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const d of parser.push(decoder.decode(value, { stream: true }))) onData(d);
  }
  for (const d of parser.push(decoder.decode())) onData(d);
  for (const d of parser.end()) onData(d);
}
