// Tenax dashboard: the little the pages need beyond HTML. Forms work without it; the policy
// designer redraws as one types with it.
"use strict";

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
