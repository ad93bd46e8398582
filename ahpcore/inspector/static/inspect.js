// The AHP inspector: a read-only client of the host that served this page.
//
// It connects over the host's WebSocket with the token from the page's own
// address, subscribes to the root channel and to the sessions and chats the
// host has open, and asks ahp/inspect once a second for what only the host
// knows. Everything the host sends is shown as text (textContent, attribute
// values), never parsed as markup: a session title is whatever a user typed.
"use strict";
(() => {
  const ROOT = "ahp-root://";
  const PROTOCOL_VERSIONS = ["1.0.0"];
  const RECENT_PER_CHANNEL = 25;
  const RATE_POINTS = 120; // two minutes at one figure a second
  const LATENCY_POINTS = 40;
  const POLL_MS = 1000;
  // Watching more would cost the host a copy of every action of each.
  const MAX_WATCHED = 64;
  const MAX_SESSION_ROWS = 200;

  const $ = (id) => document.getElementById(id);

  /** An element with attributes and children; strings become text nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (name === "class") node.className = value;
      else node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const integer = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
  const decimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });

  function bytes(n) {
    if (typeof n !== "number") return "–";
    const units = ["B", "KiB", "MiB", "GiB"];
    let value = n;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${unit === 0 ? integer.format(value) : decimal.format(value)} ${units[unit]}`;
  }

  function duration(ms) {
    if (typeof ms !== "number") return "–";
    return ms < 1000 ? `${integer.format(ms)} ms` : `${decimal.format(ms / 1000)} s`;
  }

  function since(seconds) {
    if (typeof seconds !== "number") return "–";
    const s = Math.floor(seconds);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  // SessionStatus is a bitset: Idle 1, Error 2, InProgress 8, InputNeeded 16 (with 8),
  // IsRead 32, IsArchived 64.
  function status(bits) {
    if (typeof bits !== "number") return { text: "unknown", kind: "" };
    let text = "idle";
    let kind = "";
    if ((bits & 16) !== 0) [text, kind] = ["needs input", "input"];
    else if ((bits & 8) !== 0) [text, kind] = ["in progress", "busy"];
    else if ((bits & 2) !== 0) [text, kind] = ["error", "error"];
    if ((bits & 64) !== 0) text += ", archived";
    return { text, kind };
  }

  function badge(bits) {
    const s = status(bits);
    return el("span", { class: `badge ${s.kind}`.trim(), "data-status": bits }, s.text);
  }

  // -- the connection ------------------------------------------------------------

  const address = new URLSearchParams(location.search);
  const token = address.get("token") ?? address.get("tkn");

  function socketUrl() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const query = token ? `?token=${encodeURIComponent(token)}` : "";
    return `${scheme}//${location.host}/${query}`;
  }

  let socket = null;
  let nextId = 1;
  let pending = new Map();
  let retryMs = 1000;
  let pollTimer = null;

  function request(method, params) {
    return new Promise((resolve, reject) => {
      if (!socket || socket.readyState !== WebSocket.OPEN) {
        reject(new Error("not connected"));
        return;
      }
      const id = nextId++;
      pending.set(id, { resolve, reject, method });
      socket.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }

  function setStatus(text, kind) {
    const node = $("status");
    node.textContent = text;
    node.className = kind || "";
  }

  function connect() {
    reset();
    setStatus("Connecting…");
    const ws = new WebSocket(socketUrl());
    socket = ws;
    ws.addEventListener("open", () => {
      retryMs = 1000;
      start().catch((error) => setStatus(`Could not start: ${error.message}`, "lost"));
    });
    ws.addEventListener("message", (event) => receive(event.data));
    ws.addEventListener("close", (event) => {
      if (socket !== ws) return;
      socket = null;
      clearTimeout(pollTimer);
      for (const { reject } of pending.values()) reject(new Error("connection closed"));
      pending = new Map();
      const why = event.reason ? `: ${event.reason}` : ` (code ${event.code})`;
      setStatus(`Connection lost${why}. Trying again in ${retryMs / 1000} s.`, "lost");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 30000);
    });
  }

  function receive(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (message === null || typeof message !== "object") return;
    if (!("method" in message)) {
      const waiting = pending.get(message.id);
      if (!waiting) return;
      pending.delete(message.id);
      if (message.error) {
        waiting.reject(new Error(`${waiting.method}: ${message.error.message}`));
      } else {
        waiting.resolve(message.result);
      }
      return;
    }
    if ("id" in message) {
      // The host asks nothing of a client that offers nothing; refuse anything all the same.
      if (!socket || socket.readyState !== WebSocket.OPEN) return;
      socket.send(
        JSON.stringify({
          jsonrpc: "2.0",
          id: message.id,
          error: { code: -32601, message: "the inspector answers no requests" },
        }),
      );
      return;
    }
    if (message.method === "action") onAction(message.params || {});
    else onNotification(message.method, message.params || {});
  }

  async function start() {
    const clientId = `ahp-inspector-${Math.random().toString(16).slice(2, 10)}`;
    const result = await request("initialize", {
      channel: ROOT,
      protocolVersions: PROTOCOL_VERSIONS,
      clientId,
      clientInfo: { name: "ahp-inspector" },
      initialSubscriptions: [ROOT],
    });
    for (const snapshot of result.snapshots || []) took(snapshot);
    watched.add(ROOT);
    setStatus(`Connected as ${clientId}, protocol ${result.protocolVersion}.`, "live");
    await listSessions();
    await poll();
  }

  async function listSessions() {
    let cursor;
    do {
      const page = await request("listSessions", cursor ? { channel: ROOT, cursor } : { channel: ROOT });
      for (const item of page.items || []) sessions.set(item.resource, { ...item });
      cursor = sessions.size < MAX_SESSION_ROWS ? page.nextCursor : undefined;
    } while (cursor);
    dirty.sessions = true;
    schedule();
  }

  // -- what the page knows -------------------------------------------------------

  let states; // channel -> state as last snapshotted (root, sessions)
  let sessions; // session URI -> summary (listSessions, root notifications)
  let watched; // channels subscribed to
  let subscribing; // channels being subscribed to
  let recent; // channel -> [{seq, type, who, at}], newest first
  let rate; // [{at, perSecond}]
  let latencies; // [milliseconds]
  let lastSeq;
  let openChannels; // channels the host holds, as of the last figures
  let dirty;

  function reset() {
    states = new Map();
    sessions = new Map();
    watched = new Set();
    subscribing = new Set();
    recent = new Map();
    rate = [];
    latencies = [];
    lastSeq = null;
    openChannels = null;
    dirty = { sessions: true, actions: new Set(), charts: true };
    $("actions").replaceChildren();
  }

  function took(snapshot) {
    if (!snapshot || typeof snapshot.resource !== "string") return;
    states.set(snapshot.resource, snapshot.state);
    dirty.sessions = true;
    schedule();
  }

  function agentName(provider) {
    const root = states.get(ROOT);
    const agent = ((root && root.agents) || []).find((a) => a.provider === provider);
    return agent ? agent.displayName : provider;
  }

  function onNotification(method, params) {
    if (method === "root/sessionAdded" && params.summary) {
      sessions.set(params.summary.resource, { ...params.summary });
    } else if (method === "root/sessionRemoved") {
      sessions.delete(params.session);
    } else if (method === "root/sessionSummaryChanged") {
      const known = sessions.get(params.session);
      if (known) Object.assign(known, params.changes || {});
    } else {
      return;
    }
    dirty.sessions = true;
    schedule();
  }

  function onAction(envelope) {
    const { channel, action, serverSeq, origin } = envelope;
    if (typeof channel !== "string" || !action || typeof action.type !== "string") return;
    const list = recent.get(channel) || [];
    list.unshift({
      seq: serverSeq,
      type: action.type,
      who: origin ? origin.clientId : "host",
      refused: "rejectionReason" in envelope,
      at: new Date(),
    });
    list.length = Math.min(list.length, RECENT_PER_CHANNEL);
    recent.set(channel, list);
    dirty.actions.add(channel);
    if (!("rejectionReason" in envelope)) follow(channel, action);
    schedule();
  }

  /** The few actions that change what the tables show: not a reducer, a summary. */
  function follow(channel, action) {
    const state = states.get(channel);
    if (channel === ROOT && state && action.type === "root/agentsChanged") {
      state.agents = action.agents;
      dirty.sessions = true;
    }
    const session = sessions.get(channel);
    if (state && state.chats !== undefined) {
      if (action.type === "session/titleChanged") {
        state.title = action.title;
        if (session) session.title = action.title;
      } else if (action.type === "session/chatAdded" && action.summary) {
        state.chats = [...(state.chats || []), { ...action.summary }];
      } else if (action.type === "session/chatRemoved") {
        state.chats = (state.chats || []).filter((chat) => chat.resource !== action.chat);
      } else if (action.type === "session/chatUpdated") {
        for (const chat of state.chats || []) {
          if (chat.resource === action.chat) Object.assign(chat, action.changes || {});
        }
      }
      dirty.sessions = true;
    }
    if (
      (action.type === "chat/turnComplete" ||
        action.type === "chat/turnCancelled" ||
        action.type === "chat/error") &&
      typeof action.duration === "number"
    ) {
      latencies.push(action.duration);
      if (latencies.length > LATENCY_POINTS) latencies.shift();
      dirty.charts = true;
    }
  }

  // -- the host's own figures ------------------------------------------------------

  async function poll() {
    clearTimeout(pollTimer);
    try {
      const figures = await request("ahp/inspect", {});
      showFigures(figures);
      await watch(figures.channels || []);
    } catch (error) {
      if (socket) setStatus(`ahp/inspect failed: ${error.message}`, "lost");
    }
    if (socket) pollTimer = setTimeout(poll, POLL_MS);
  }

  /** Subscribe to the sessions and chats the host has open (never reopening a closed one). */
  async function watch(channels) {
    const open = new Set(channels.map((c) => c.uri));
    if (!openChannels || open.size !== openChannels.size || [...open].some((u) => !openChannels.has(u))) {
      dirty.sessions = true;
    }
    openChannels = open;
    for (const uri of [...watched]) {
      // A channel the host let go is no longer watched: it ended our subscription.
      if (uri !== ROOT && !open.has(uri)) {
        watched.delete(uri);
        states.delete(uri);
        recent.delete(uri);
        dirty.actions.add(uri);
        dirty.sessions = true;
      }
    }
    const wanted = channels.filter(
      (c) => (c.kind === "session" || c.kind === "chat") && !watched.has(c.uri) && !subscribing.has(c.uri),
    );
    for (const channel of wanted) {
      if (watched.size + subscribing.size >= MAX_WATCHED) break;
      subscribing.add(channel.uri);
      request("subscribe", { channel: channel.uri })
        .then((answer) => {
          watched.add(channel.uri);
          if (answer && answer.snapshot) took(answer.snapshot);
          if (!recent.has(channel.uri)) recent.set(channel.uri, []);
          dirty.actions.add(channel.uri);
          schedule();
        })
        .catch(() => {}) // gone before we asked: the next figures will say so
        .finally(() => subscribing.delete(channel.uri));
    }
    schedule();
  }

  function showFigures(f) {
    $("host-version").textContent = `ahp ${f.version}`;
    $("uptime").textContent = since(f.uptimeSeconds);
    $("server-seq").textContent = String(f.serverSeq);
    $("channel-count").textContent = integer.format(f.channelCount);
    const now = performance.now();
    if (lastSeq !== null && now > lastSeq.at) {
      const perSecond = Math.max(0, f.serverSeq - lastSeq.seq) / ((now - lastSeq.at) / 1000);
      rate.push(perSecond);
      if (rate.length > RATE_POINTS) rate.shift();
      dirty.charts = true;
    }
    lastSeq = { seq: f.serverSeq, at: now };
    showClients(f.clients || [], f.hostQueues);
    showReplay(f.replay || {});
    showPlugins(f.plugins || [], f.pluginFailures || [], f.extraMethods || []);
    schedule();
  }

  function showClients(clients, queues) {
    const rows = clients.map((c) => {
      const budget = c.inbound
        ? `${integer.format(Math.max(0, c.inbound.frames))} of ${integer.format(c.inbound.frameCapacity)} frames, ` +
          `${bytes(Math.max(0, c.inbound.bytes))} of ${bytes(c.inbound.byteCapacity)}` +
          (c.inbound.refused ? `, ${integer.format(c.inbound.refused)} refused` : "")
        : "unbounded";
      const queued = c.queuedBytes + c.heldBytes;
      return el(
        "tr",
        { "data-connection": c.connection },
        el("td", { class: "num" }, c.connection),
        el("td", {}, c.clientId ?? "(not initialized)", c.you ? el("span", { class: "you" }, " (this page)") : null),
        el("td", {}, c.transport),
        el("td", {}, c.protocolVersion ?? "–"),
        el("td", { class: "num" }, c.subscriptions),
        el("td", { class: "num", title: `limit ${bytes(c.queueLimit)}` }, bytes(queued)),
        el("td", {}, budget),
      );
    });
    $("clients").tBodies[0].replaceChildren(...rows);
    $("host-queues").textContent = queues
      ? `All clients have ${bytes(queues.bytes)} yet to take, of a ceiling of ${bytes(queues.ceiling)}` +
        ` (closed for falling behind: ${queues.closedFurthestBehind}, dropped while closing: ${queues.dropped}).`
      : "";
  }

  function showReplay(r) {
    const entries = $("replay-entries");
    entries.max = Math.max(1, r.maxEntries || 1);
    entries.value = r.entries || 0;
    $("replay-entries-text").textContent = `${integer.format(r.entries || 0)} of ${integer.format(r.maxEntries || 0)}`;
    const size = $("replay-bytes");
    size.max = Math.max(1, r.maxBytes || 1);
    size.value = r.bytes || 0;
    $("replay-bytes-text").textContent =
      `${bytes(r.bytes || 0)} of ${bytes(r.maxBytes || 0)}` +
      (r.oldestSeq !== null && r.oldestSeq !== undefined ? `; oldest serverSeq ${r.oldestSeq}` : "");
  }

  let pluginsShown = "";

  function showPlugins(plugins, failures, methods) {
    const key = JSON.stringify([plugins, failures, methods]);
    if (key === pluginsShown) return;
    pluginsShown = key;
    $("plugins").tBodies[0].replaceChildren(
      ...plugins.map((p) =>
        el(
          "tr",
          {},
          el("td", {}, p.name, p.essential ? el("span", { class: "you" }, " (essential)") : null),
          el("td", {}, p.version ?? "–"),
          el("td", {}, p.distribution ?? "–"),
          el("td", { class: "uri" }, (p.hooks || []).join(", ") || "none"),
        ),
      ),
    );
    $("plugin-failures").replaceChildren(
      ...(failures.length
        ? [el("h3", {}, "Left out"), el("ul", {}, ...failures.map((f) => el("li", {}, `${f.name}: ${f.error}`)))]
        : []),
    );
    $("extra-methods").replaceChildren(
      ...(methods.length
        ? [
            el("h3", {}, "Methods beyond the protocol"),
            el("ul", {}, ...methods.map((m) => el("li", {}, el("code", {}, m.method), ` (${m.owner})`))),
          ]
        : []),
    );
  }

  // -- drawing, once per frame at most ---------------------------------------------

  let scheduled = false;

  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => {
      scheduled = false;
      if (dirty.sessions) showSessions();
      if (dirty.actions.size) showActions();
      if (dirty.charts) showCharts();
    });
  }

  function chatsOf(uri, summary) {
    const live = states.get(uri);
    const chats = (live && live.chats) || summary.chats || [];
    if (!chats.length) return "–";
    return el(
      "ul",
      { class: "chats" },
      ...chats.map((chat) =>
        el("li", { "data-chat": chat.resource }, chat.title || "(untitled)", " ", badge(chat.status)),
      ),
    );
  }

  function showSessions() {
    dirty.sessions = false;
    const rows = [...sessions.values()]
      .sort((a, b) => String(b.modifiedAt || "").localeCompare(String(a.modifiedAt || "")))
      .slice(0, MAX_SESSION_ROWS)
      .map((s) => {
        const live = states.get(s.resource);
        return el(
          "tr",
          { "data-session": s.resource },
          el("td", {}, (live && live.title) || s.title || "(untitled)"),
          el("td", {}, agentName(s.provider)),
          el(
            "td",
            {},
            badge(s.status),
            openChannels && !openChannels.has(s.resource) ? el("span", { class: "you" }, " closed") : null,
          ),
          el("td", {}, chatsOf(s.resource, s)),
          el("td", { class: "uri" }, s.resource),
        );
      });
    $("sessions").tBodies[0].replaceChildren(...rows);
    $("sessions-empty").hidden = rows.length > 0;
  }

  function channelTitle(uri) {
    if (uri === ROOT) return "root";
    const session = sessions.get(uri);
    if (session) return `session: ${session.title || "(untitled)"}`;
    for (const state of states.values()) {
      const chat = ((state && state.chats) || []).find((c) => c.resource === uri);
      if (chat) return `chat: ${chat.title || "(untitled)"}`;
    }
    return "";
  }

  function showActions() {
    const box = $("actions");
    for (const uri of dirty.actions) {
      const id = `channel-${encodeURIComponent(uri)}`;
      let section = document.getElementById(id);
      const list = recent.get(uri);
      if (!list) {
        if (section) section.remove();
        continue;
      }
      if (!section) {
        section = el(
          "section",
          { class: "channel", id, "data-channel": uri, "aria-label": `Actions on ${uri}` },
          el("h3", {}, uri),
          el("p", { class: "note" }),
          el("ol", {}),
        );
        box.append(section);
      }
      section.querySelector("p").textContent = channelTitle(uri);
      section.querySelector("ol").replaceChildren(
        ...list.map((a) =>
          el(
            "li",
            { "data-type": a.type },
            el("span", { class: "seq" }, a.seq ?? "–"),
            el("span", {}, a.refused ? `${a.type} (refused)` : a.type),
            el("span", { class: "who", title: a.at.toLocaleTimeString() }, a.who),
          ),
        ),
      );
    }
    dirty.actions.clear();
    $("actions-empty").hidden = [...recent.values()].some((l) => l.length > 0);
    $("actions-kept").textContent = String(RECENT_PER_CHANNEL);
  }

  function colour(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }

  function canvasOf(id) {
    const canvas = $(id);
    const scale = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(width * scale)) {
      canvas.width = Math.round(width * scale);
      canvas.height = Math.round(height * scale);
    }
    const context = canvas.getContext("2d");
    context.setTransform(scale, 0, 0, scale, 0, 0);
    context.clearRect(0, 0, width, height);
    context.font = "11px system-ui, sans-serif";
    return { canvas, context, width, height };
  }

  function axes(context, width, height, top) {
    context.strokeStyle = colour("--line");
    context.beginPath();
    context.moveTo(0, height - 0.5);
    context.lineTo(width, height - 0.5);
    context.stroke();
    context.fillStyle = colour("--muted");
    context.fillText(top, 4, 12);
  }

  function showCharts() {
    dirty.charts = false;
    {
      const { canvas, context, width, height } = canvasOf("rate-chart");
      const peak = Math.max(1, ...rate);
      axes(context, width, height, `peak ${decimal.format(peak)}/s`);
      context.strokeStyle = colour("--accent");
      context.lineWidth = 1.5;
      context.beginPath();
      rate.forEach((value, index) => {
        const x = width - (rate.length - 1 - index) * (width / (RATE_POINTS - 1));
        const y = height - 2 - (value / peak) * (height - 20);
        if (index === 0) context.moveTo(x, y);
        else context.lineTo(x, y);
      });
      context.stroke();
      const now = rate.length ? rate[rate.length - 1] : null;
      $("rate-now").textContent = now === null ? "–" : `${decimal.format(now)}/s`;
      canvas.setAttribute(
        "aria-label",
        now === null
          ? "Actions per second: no figures yet"
          : `Actions per second: ${decimal.format(now)} now, at most ${decimal.format(peak)} in the last two minutes`,
      );
    }
    {
      const { canvas, context, width, height } = canvasOf("latency-chart");
      const peak = Math.max(1, ...latencies);
      axes(context, width, height, `longest ${duration(peak)}`);
      context.fillStyle = colour("--accent");
      const slot = width / LATENCY_POINTS;
      latencies.forEach((value, index) => {
        const x = width - (latencies.length - index) * slot;
        const h = Math.max(1, (value / peak) * (height - 20));
        context.fillRect(x + 1, height - 1 - h, Math.max(1, slot - 2), h);
      });
      const last = latencies.length ? latencies[latencies.length - 1] : null;
      $("latency-now").textContent = last === null ? "–" : `${duration(last)} (last)`;
      canvas.setAttribute(
        "aria-label",
        last === null
          ? "Turn durations: no turn yet"
          : `Turn durations: the last took ${duration(last)}, the longest of ${latencies.length} ${duration(peak)}`,
      );
    }
  }

  window.addEventListener("resize", () => {
    dirty.charts = true;
    schedule();
  });
  reset();
  connect();
})();
