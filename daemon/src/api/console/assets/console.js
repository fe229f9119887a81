// cmdgate console: the little JavaScript the server-rendered pages need. Served by the console
// itself (no CDN); every change is a same-origin JSON POST (the server checks Origin and the
// content type), and every piece of HTML it inserts was rendered and escaped by the server.
"use strict";

function toast(message, bad) {
  const t = document.getElementById("toast");
  if (!t) return;
  t.textContent = message;
  t.className = bad ? "show bad" : "show";
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.className = ""; }, 6000);
}

async function post(url, body) {
  const r = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  let v = {};
  try { v = await r.json(); } catch (_) { v = { message: "HTTP " + r.status }; }
  return { status: r.status, ok: r.ok, v: v };
}

function seen() {
  const d = document.body.dataset;
  return {
    revision: d.revision === undefined ? null : Number(d.revision),
    audit: d.seenAudit === undefined ? null : Number(d.seenAudit),
  };
}

// ----- Pending ---------------------------------------------------------------------------------

function closeCard(card, text, cls) {
  if (!card) return;
  // This page's own answer is the last word; what the event stream says may follow it.
  if (card.classList.contains("answered") && cls !== "answered") return;
  card.classList.add("closed", cls || "gone");
  card.querySelectorAll("button, textarea").forEach((b) => { b.disabled = true; });
  const out = card.querySelector(".outcome");
  if (out) out.textContent = text;
  const dl = card.querySelector(".deadline");
  if (dl) dl.textContent = cls === "answered" ? "answered" : "closed";
}

function wireCard(card) {
  card.querySelectorAll("button[data-act]").forEach((b) => {
    b.addEventListener("click", async () => {
      const note = card.querySelector("textarea[name=note]").value;
      const body = { remember: b.dataset.remember === "1" };
      if (note.trim() !== "") body.note = note;
      card.querySelectorAll("button").forEach((x) => { x.disabled = true; });
      const r = await post("/pending/" + card.dataset.id + "/" + b.dataset.act, body);
      if (r.ok) {
        closeCard(card, r.v.message, "answered");
        card.classList.add(b.dataset.act === "approve" ? "approved" : "rejected");
        toast("#" + card.dataset.id + ": " + r.v.message);
      } else {
        closeCard(card, r.v.message || ("refused (" + r.status + ")"), "gone");
        toast(r.v.message, true);
      }
    });
  });
}

function countdowns() {
  document.querySelectorAll(".card:not(.closed)").forEach((c) => {
    const left = Math.max(0, Math.round((Number(c.dataset.deadline) - Date.now()) / 1000));
    const el = c.querySelector(".left");
    if (el) el.textContent = String(left);
  });
}

function updateEmpty() {
  const empty = document.getElementById("empty");
  if (empty) empty.hidden = document.querySelector(".card:not(.closed)") !== null;
}

function pendingPage() {
  const cards = document.getElementById("cards");
  document.querySelectorAll(".card").forEach(wireCard);
  setInterval(countdowns, 1000);
  const known = Array.from(document.querySelectorAll(".card")).map((c) => c.dataset.id).join(",");
  const live = document.getElementById("live");
  const es = new EventSource("/events?known=" + encodeURIComponent(known));
  es.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
  es.addEventListener("error", () => { live.textContent = "reconnecting…"; live.className = "live off"; });
  es.addEventListener("card", (e) => {
    const d = JSON.parse(e.data);
    if (document.getElementById("card-" + d.id)) return;
    const t = document.createElement("template");
    t.innerHTML = d.html;
    const card = t.content.firstElementChild;
    cards.prepend(card);
    wireCard(card);
    updateEmpty();
    toast("New request #" + d.id + " is waiting for an answer.");
  });
  es.addEventListener("gone", (e) => {
    const d = JSON.parse(e.data);
    const card = document.getElementById("card-" + d.id);
    if (card) closeCard(card, d.text, "gone");
    updateEmpty();
  });
}

// ----- History -----------------------------------------------------------------------------------

function historyPage() {
  document.querySelectorAll("details.row").forEach((row) => {
    row.addEventListener("toggle", async () => {
      if (!row.open || row.dataset.loaded) return;
      row.dataset.loaded = "1";
      const r = await fetch("/history/" + row.dataset.id + "/evidence", { credentials: "same-origin" });
      const ev = row.querySelector(".evidence");
      ev.innerHTML = await r.text();
      const rem = ev.querySelector(".remember");
      if (rem) wireRemember(rem);
    });
  });
}

function wireRemember(rem) {
  rem.querySelectorAll("button[data-kind]").forEach((b) => {
    b.addEventListener("click", async () => {
      const s = seen();
      const note = rem.querySelector("input[name=note]").value;
      const body = { kind: b.dataset.kind, if_revision: s.revision, seen_audit: s.audit };
      if (note.trim() !== "") body.note = note;
      const r = await post("/history/" + rem.dataset.id + "/remember", body);
      const out = rem.querySelector(".outcome");
      out.textContent = r.ok ? ("Remembered as rule #" + r.v.result.id + ".") : r.v.message;
      out.className = r.ok ? "outcome good" : "outcome bad";
      if (r.ok && r.v.revision !== undefined) document.body.dataset.revision = r.v.revision;
    });
  });
}

// ----- Profile -----------------------------------------------------------------------------------

function profilePage() {
  document.querySelectorAll("details.rule").forEach((rule) => {
    rule.addEventListener("toggle", async () => {
      if (!rule.open || rule.dataset.loaded) return;
      rule.dataset.loaded = "1";
      const r = await fetch("/rules/" + rule.dataset.id + "/detail", { credentials: "same-origin" });
      rule.querySelector(".detail").innerHTML = await r.text();
    });
    rule.querySelectorAll("button[data-act]").forEach((b) => {
      b.addEventListener("click", async () => {
        const s = seen();
        const r = await post("/rules/" + rule.dataset.id + "/" + b.dataset.act,
          { if_revision: s.revision, seen_audit: s.audit });
        const out = rule.querySelector(".outcome");
        out.textContent = r.v.message;
        out.className = r.ok ? "outcome good" : "outcome bad";
        if (r.ok) {
          out.textContent = "Done. Reloading…";
          location.reload();
        }
      });
    });
  });
  document.querySelectorAll("button[data-scope]").forEach((b) => {
    b.addEventListener("click", async () => {
      const r = await post("/breaker/reset", { scope: b.dataset.scope });
      const out = document.getElementById("breaker-outcome");
      out.textContent = r.v.message;
      out.className = r.ok ? "outcome good" : "outcome bad";
      if (r.ok) location.reload();
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "pending") pendingPage();
  if (page === "history") historyPage();
  if (page === "profile") profilePage();
});
