// Tenax dashboard: the little the pages need beyond HTML. Forms work without it; with it, live
// pages update themselves and the policy designer redraws as one types.
"use strict";

// Live pages (those whose <main> has data-live) fetch themselves again every few seconds and
// swap in the parts of their main content that changed: no reload, no flicker, the scroll
// position kept. Not while the switch in the header says "Paused" (remembered in
// localStorage), nor while the tab is hidden, nor while the user is in the middle of something
// on the page: typing in a field, a form changed and not sent (ticked jobs), a menu or a
// <details> open. The switch's data-state says what it is doing and data-skipped counts the
// rounds it let pass, for people and for the browser tests.
(function () {
  const EVERY_MS = 3000;
  const KEY = "tenax.live";
  const main = document.querySelector("main[data-live]");
  const button = document.getElementById("live");
  if (!main || !button) return;

  const remembered = () => {
    try { return localStorage.getItem(KEY) !== "off"; } catch (_) { return true; }
  };
  const remember = (on) => {
    try { localStorage.setItem(KEY, on ? "on" : "off"); } catch (_) { /* private mode: not kept */ }
  };
  let on = remembered();
  let timer = 0;
  let fetching = false;
  let skipped = 0;

  const show = (state) => {
    button.hidden = false;
    button.dataset.state = state;
    button.dataset.skipped = String(skipped);
    button.setAttribute("aria-checked", String(on));
    button.textContent = on ? "Live" : "Paused";
    button.title = {
      live: "Live: this page updates itself every few seconds. Click to pause.",
      off: "Paused: this page shows what it showed when it loaded. Click to go live.",
      hidden: "Live, waiting while the tab is hidden.",
      busy: "Live, waiting while you use the page.",
      failed: "Live, but the last update failed; trying again.",
      gone: "What this page shows is gone (deleted or purged): it no longer updates.",
    }[state];
  };

  // A field whose value is not the one the page came with.
  const changed = (field) => {
    if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
    if (field.tagName === "SELECT") {
      const first = [...field.options].findIndex((o) => o.defaultSelected);
      return field.selectedIndex !== Math.max(first, 0);
    }
    if (field.type === "hidden" || field.type === "submit" || field.type === "button") return false;
    return field.value !== field.defaultValue;
  };
  const busy = () => {
    const active = document.activeElement;
    if (active && main.contains(active) && active.matches("input, textarea, select, [contenteditable]")) return true;
    if (main.querySelector("details[open], dialog[open]")) return true;
    return [...main.querySelectorAll("input, textarea, select")].some(changed);
  };

  // Replaces the children of <main> that differ from the fresh page's, in place.
  const swap = (fresh) => {
    const x = window.scrollX;
    const y = window.scrollY;
    const old = [...main.children];
    const now = [...fresh.children];
    now.forEach((node, i) => {
      if (i >= old.length) main.appendChild(node);
      else if (!old[i].isEqualNode(node)) main.replaceChild(node, old[i]);
    });
    for (const extra of old.slice(now.length)) extra.remove();
    window.scrollTo(x, y);
  };

  const next = (ms) => {
    clearTimeout(timer);
    timer = setTimeout(round, ms);
  };
  const round = async () => {
    if (fetching) return; // the fetch under way sets the next round
    const waiting = !on ? "off" : document.visibilityState === "hidden" ? "hidden" : busy() ? "busy" : null;
    if (waiting) {
      skipped += 1;
      show(waiting);
      next(EVERY_MS);
      return;
    }
    fetching = true;
    let still = true;
    try {
      const response = await fetch(location.href, { cache: "no-store", credentials: "same-origin" });
      // What the page shows was deleted: asking again will not bring it back.
      if (response.status === 404) {
        show("gone");
        return;
      }
      // Signed out, or the server failed: keep what is shown; the next click says why.
      if (!response.ok || response.redirected) throw new Error(String(response.status));
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main");
      if (!fresh) throw new Error("no main content");
      // The user started something while the page was on its way: theirs wins.
      if (on && !busy()) {
        swap(fresh);
        document.title = page.title;
        // A page that stopped changing (a job that finished) is shown once more, then left.
        still = fresh.hasAttribute("data-live");
      }
      show(on ? "live" : "off");
    } catch (_) {
      show("failed");
    } finally {
      fetching = false;
    }
    if (still) {
      next(EVERY_MS);
    } else {
      main.removeAttribute("data-live");
      button.hidden = true;
    }
  };

  button.addEventListener("click", () => {
    on = !on;
    remember(on);
    show(on ? "live" : "off");
    next(on ? 0 : EVERY_MS);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && on) next(0);
  });
  show(on ? "live" : "off");
  next(EVERY_MS);
})();

(function () {
  const csrf = () => {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  };

  // Buttons that destroy ask first.
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) {
      event.preventDefault();
    }
  });

  // "Select all on this page".
  document.addEventListener("change", (event) => {
    const all = event.target.closest("input[data-select-all]");
    if (!all) return;
    const name = all.dataset.selectAll;
    for (const box of all.form.querySelectorAll(`input[type=checkbox][name="${name}"]`)) {
      box.checked = all.checked;
    }
  });

  // Copy a spelling.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.copy");
    if (!button) return;
    const text = button.parentElement.querySelector("pre").textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      const area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });

  const designer = document.getElementById("designer");
  if (!designer) return;
  const result = document.getElementById("result");

  // Parameters as fields: one per value of the policy's JSON (nested objects by path).
  const leaves = (value, path, out) => {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      for (const [key, inner] of Object.entries(value)) leaves(inner, path.concat(key), out);
    } else if (path.length) {
      out.push([path, value]);
    }
    return out;
  };

  const setAt = (object, path, value) => {
    let at = object;
    for (const key of path.slice(0, -1)) at = at[key];
    at[path[path.length - 1]] = value;
  };

  const readField = (input, before) => {
    const text = input.value.trim();
    if (Array.isArray(before)) {
      try { return JSON.parse(text); } catch (_) {
        return text.split(",").map((s) => s.trim()).filter(Boolean)
          .map((s) => (/^-?\d+(\.\d+)?$/.test(s) ? Number(s) : s));
      }
    }
    if (typeof before === "boolean") return input.checked;
    if (typeof before === "number" && /^-?\d+(\.\d+)?(e-?\d+)?$/i.test(text)) return Number(text);
    if (/^-?\d+(\.\d+)?$/.test(text) && typeof before !== "string") return Number(text);
    return text;
  };

  const renderParams = (slot) => {
    const area = slot.querySelector("textarea.policy");
    const box = slot.querySelector(".params");
    let policy;
    try { policy = JSON.parse(area.value); } catch (_) { return; }
    box.replaceChildren();
    for (const [path, value] of leaves(policy, [], [])) {
      if (path.length === 1 && path[0] === "type") continue;
      const label = document.createElement("label");
      label.textContent = path[path.length - 1].replace(/_/g, " ") + " ";
      const input = document.createElement("input");
      input.dataset.path = JSON.stringify(path);
      input.name = "";
      if (typeof value === "boolean") {
        input.type = "checkbox";
        input.checked = value;
      } else {
        input.value = Array.isArray(value) ? value.join(", ") : String(value);
      }
      input.addEventListener("input", () => {
        let current;
        try { current = JSON.parse(area.value); } catch (_) { return; }
        let before = current;
        for (const key of path) before = before[key];
        setAt(current, path, readField(input, before));
        area.value = JSON.stringify(current, null, 2);
        schedule();
      });
      label.appendChild(input);
      box.appendChild(label);
    }
  };

  // The shape menu follows a policy typed as JSON.
  const followShape = (slot) => {
    let policy;
    try { policy = JSON.parse(slot.querySelector("textarea.policy").value); } catch (_) { return; }
    if (!policy || typeof policy !== "object") return;
    let shape = typeof policy.type === "string" ? policy.type : null;
    if (!shape && ("healthyRetryPolicy" in policy || "http" in policy)) shape = "sns";
    if (!shape && ("_retry_policy" in policy || "minimum_delay" in policy)) shape = "zaqar";
    const menu = slot.querySelector("select.shape");
    if (shape && [...menu.options].some((o) => o.value === shape)) menu.value = shape;
  };

  let timer = null;
  let sequence = 0;
  const redraw = async () => {
    const mine = ++sequence;
    const body = new URLSearchParams(new FormData(designer));
    const response = await fetch("/ui/policy/chart", {
      method: "POST",
      body,
      headers: { "X-CSRF-Token": csrf() },
      credentials: "same-origin",
    });
    const text = await response.text();
    // An older answer arriving late must not replace a newer one.
    if (mine === sequence) {
      result.innerHTML = text;
      designer.dataset.drawn = String(mine);
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(redraw, 150);
  };

  for (const slot of designer.querySelectorAll("fieldset.slot")) {
    renderParams(slot);
    const area = slot.querySelector("textarea.policy");
    slot.querySelector("select.shape").addEventListener("change", (event) => {
      const option = event.target.selectedOptions[0];
      area.value = option.dataset.template;
      slot.querySelector('input[type=checkbox][name^="on"]').checked = true;
      renderParams(slot);
      schedule();
    });
    area.addEventListener("input", () => {
      renderParams(slot);
      followShape(slot);
      schedule();
    });
  }
  designer.addEventListener("change", (event) => {
    if (event.target.matches('input[type=checkbox][name^="on"], input[name="log"]')) schedule();
  });
  designer.addEventListener("submit", (event) => { event.preventDefault(); redraw(); });
})();
