"use strict";
(function () {
  var data = JSON.parse(document.getElementById("viewer-data").textContent);
  var byId = function (id) { return document.getElementById(id); };
  var ops = new Map();
  (data.ops || []).forEach(function (o) { ops.set(o.i, o); });
  var groups = new Map();
  document.querySelectorAll("g.op[data-op]").forEach(function (g) { groups.set(Number(g.dataset.op), g); });

  function cell(row, text, tag) {
    var td = document.createElement(tag || "td"); td.textContent = text; row.appendChild(td); return td;
  }
  function showDetails(i) {
    var box = byId("details"); if (!box) return;
    box.replaceChildren();
    groups.forEach(function (g) { g.classList.remove("selected"); });
    var o = ops.get(i);
    if (!o) { box.textContent = "Operation #" + i + " is not drawn on this page (size cap)."; return; }
    var g = groups.get(i); if (g) g.classList.add("selected");
    var table = document.createElement("table"); table.id = "details-table";
    var fields = [["operation", "#" + o.i], ["process", String(o.p)], ["outcome", o.t],
      ["interval", "[" + o.call + ", " + (o.ret === null ? "∞ (outcome unknown)" : o.ret) + "]"],
      ["function", o.f], ["object", o.obj], ["in words", o.d], ["value", o.v]];
    if (o.r !== null) fields.push(["result", o.r]);
    if (o.e) fields.push(["error", o.e]);
    (o.roles || []).forEach(function (r) { fields.push(["role", r]); });
    if (data.kind === "linearizability" && current.lin !== null) {
      var L = data.lins[current.lin], at = L.order.indexOf(i);
      fields.push(["in this linearization", at < 0 ? "not placed" : "step " + (L.first + at + 1)]);
    }
    fields.forEach(function (f) {
      var tr = document.createElement("tr"); cell(tr, f[0]); cell(tr, f[1]); table.appendChild(tr);
    });
    box.appendChild(table);
  }
  groups.forEach(function (g, i) {
    g.setAttribute("tabindex", "0");
    g.addEventListener("click", function () { showDetails(i); });
    g.addEventListener("keydown", function (e) { if (e.key === "Enter") showDetails(i); });
  });
  document.querySelectorAll("[data-show-op]").forEach(function (a) {
    a.addEventListener("click", function (e) {
      e.preventDefault(); var i = Number(a.dataset.showOp); showDetails(i);
      var g = groups.get(i); if (g) g.scrollIntoView({block: "nearest", inline: "center"});
    });
  });

  // states: "paths" once, a base, then what each step set and deleted
  function rebuild(enc) {
    var out = [], cur = new Map();
    enc.base.forEach(function (r) { cur.set(r[0], r[1]); });
    out.push({rows: cur, changed: new Set(), removed: []});
    enc.diffs.forEach(function (d) {
      var next = new Map(cur), removed = [];
      d.del.forEach(function (p) { removed.push([p, cur.get(p)]); next.delete(p); });
      d.set.forEach(function (r) { next.set(r[0], r[1]); });
      out.push({rows: next, changed: new Set(d.set.map(function (r) { return r[0]; })), removed: removed});
      cur = next;
    });
    return out;
  }
  function fillState(tbody, enc, state) {
    tbody.replaceChildren();
    var ids = Array.from(state.rows.keys()).concat(state.removed.map(function (r) { return r[0]; }));
    ids.sort(function (a, b) { return a - b; });
    var gone = new Map(state.removed);
    ids.forEach(function (id) {
      var tr = document.createElement("tr");
      if (gone.has(id)) {
        tr.className = "removed"; cell(tr, enc.paths[id]); cell(tr, gone.get(id));
      } else {
        if (state.changed.has(id)) tr.className = "changed";
        cell(tr, enc.paths[id]); cell(tr, state.rows.get(id));
      }
      tbody.appendChild(tr);
    });
  }

  var current = {lin: null, k: 0};
  var range = byId("step-range");
  function wire(go, count) {
    byId("step-first").addEventListener("click", function () { go(0); });
    byId("step-prev").addEventListener("click", function () { go(current.k - 1); });
    byId("step-next").addEventListener("click", function () { go(current.k + 1); });
    byId("step-last").addEventListener("click", function () { go(count()); });
    range.addEventListener("input", function () { go(Number(range.value)); });
    document.addEventListener("keydown", function (e) {
      if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT")) return;
      if (e.key === "ArrowRight") go(current.k + 1);
      if (e.key === "ArrowLeft") go(current.k - 1);
      if (e.key === "Home") go(0);
      if (e.key === "End") go(count());
    });
  }

  if (data.kind === "linearizability" && data.lins.length) {
    var states = data.lins.map(rebuild);
    var select = byId("lin-select");
    var tbody = document.querySelector("#state tbody");
    var go = function (k) {
      var L = data.lins[current.lin], n = L.order.length;
      k = Math.max(0, Math.min(n, k)); current.k = k; range.max = String(n); range.value = String(k);
      groups.forEach(function (g) {
        g.classList.remove("lin", "current", "next-blocked");
        var t = g.querySelector(".ord"); if (t) t.textContent = "";
      });
      for (var j = 0; j < k; j++) {
        var g = groups.get(L.order[j]);
        if (g) { g.classList.add("lin"); g.querySelector(".ord").textContent = String(L.first + j + 1); }
      }
      var label = byId("step-label"), end = byId("step-end");
      if (k === 0) {
        label.textContent = L.first
          ? "state after step " + L.first + " (earlier steps not shown)"
          : "initial state: nothing placed yet";
      } else {
        var i = L.order[k - 1], o = ops.get(i), cur = groups.get(i);
        if (cur) cur.classList.add("current");
        label.textContent = "step " + (L.first + k) + " of " + L.total + ": #" + i + (o ? " " + o.d : "") + " placed";
      }
      if (k === n) {
        end.hidden = false;
        var lines = ["End of this partial linearization: nothing else can be placed next."];
        L.next.forEach(function (x) { lines.push("#" + x[0] + ": " + x[1]); });
        end.textContent = lines.join("\n"); end.style.whiteSpace = "pre-line";
        if (L.blocked !== null) { var b = groups.get(L.blocked); if (b) b.classList.add("next-blocked"); }
      } else { end.hidden = true; }
      byId("state-caption").textContent =
        k === 0 ? (L.first ? "after step " + L.first : "(initial)") : "after step " + (L.first + k);
      fillState(tbody, L, states[current.lin][k]);
      byId("step-prev").disabled = k === 0; byId("step-first").disabled = k === 0;
      byId("step-next").disabled = k === n; byId("step-last").disabled = k === n;
    };
    current.lin = 0;
    select.addEventListener("change", function () {
      current.lin = Number(select.value); go(data.lins[current.lin].order.length);
    });
    wire(go, function () { return data.lins[current.lin].order.length; });
    go(data.lins[0].order.length);
  }

  if (data.kind === "transactional") {
    document.querySelectorAll("button.show-anomaly").forEach(function (button) {
      button.addEventListener("click", function () {
        var n = Number(button.dataset.anomaly), mine = new Set(data.anomalies[n].ops);
        document.querySelectorAll("article.anomaly").forEach(function (a) { a.classList.remove("selected"); });
        byId("anomaly-" + n).classList.add("selected");
        groups.forEach(function (g, i) {
          g.classList.toggle("focus", mine.has(i)); g.classList.toggle("dim", !mine.has(i));
        });
        var first = groups.get(data.anomalies[n].ops[0]);
        if (first) first.scrollIntoView({block: "nearest", inline: "center"});
      });
    });
  }

  if (data.kind === "trace") {
    var names = Object.keys(data.components), rebuilt = {};
    names.forEach(function (name) { rebuilt[name] = rebuild(data.components[name]); });
    var cols = document.querySelectorAll("g.step-col");
    var goTrace = function (k) {
      var n = data.steps.length; k = Math.max(0, Math.min(n, k)); current.k = k;
      range.max = String(n); range.value = String(k);
      cols.forEach(function (c) { c.classList.toggle("current", Number(c.dataset.step) === k); });
      document.querySelectorAll("#trace-steps li").forEach(function (li) {
        li.classList.toggle("current", Number(li.dataset.step) === k);
      });
      var s = k ? data.steps[k - 1] : null;
      byId("step-label").textContent = k === 0
        ? (data.first ? "state after step " + data.first : "initial state")
        : "step " + (data.first + k) + " of " + data.total + ": " + s.actor + ": " + s.action
          + (data.loopFrom !== null && data.first + k - 1 >= data.loopFrom ? " (in the loop)" : "");
      names.forEach(function (name) {
        var box = document.querySelector("section.component[data-component='" + CSS.escape(name) + "']");
        fillState(box.querySelector("tbody"), data.components[name], rebuilt[name][k]);
        box.classList.toggle("touched", !!(s && s.changed.indexOf(name) >= 0));
      });
      byId("step-prev").disabled = k === 0; byId("step-next").disabled = k === n;
    };
    cols.forEach(function (c) { c.addEventListener("click", function () { goTrace(Number(c.dataset.step)); }); });
    document.querySelectorAll("[data-go-step]").forEach(function (a) {
      a.addEventListener("click", function (e) { e.preventDefault(); goTrace(Number(a.dataset.goStep)); });
    });
    wire(goTrace, function () { return data.steps.length; });
    goTrace(0);
  }

  if (data.kind === "index") {
    var onlyBad = byId("only-bad"), filter = byId("filter");
    var apply = function () {
      var text = filter.value.toLowerCase();
      document.querySelectorAll("#verdicts tbody tr").forEach(function (tr) {
        var bad = !tr.classList.contains("v-ok");
        tr.hidden = (onlyBad.checked && !bad) || (text && tr.textContent.toLowerCase().indexOf(text) < 0);
      });
    };
    onlyBad.addEventListener("change", apply); filter.addEventListener("input", apply);
  }
})();
