(function () {
  // datasets stored by column (qkwh/reports/specs.py pack_datasets) back into rows
  function rows(d) {
    const fields = d["qkwh.columns"];
    const cols = d.values.map(function (c) {
      return Array.isArray(c) ? c : c.codes.map(function (i) { return c.levels[i]; });
    });
    const out = new Array(d.rows);
    for (let i = 0; i < d.rows; i++) {
      const r = {};
      for (let j = 0; j < fields.length; j++) r[fields[j]] = cols[j][i];
      out[i] = r;
    }
    return out;
  }
  function unpack(spec) {
    const ds = spec.datasets;
    if (ds && typeof ds === "object") {
      Object.keys(ds).forEach(function (name) {
        const d = ds[name];
        if (d && !Array.isArray(d) && Array.isArray(d["qkwh.columns"])) ds[name] = rows(d);
      });
    }
    return spec;
  }
  const state = window.qkwhReport = { ready: false, views: {}, errors: [], total: 0 };
  const opts = { renderer: "canvas", actions: { export: true, source: true, compiled: false,
                 editor: false }, downloadFileName: null };
  const jobs = [];
  document.querySelectorAll("script.vl-spec").forEach(function (node) {
    const id = node.dataset.figure;
    const target = document.getElementById("vis-" + id);
    state.total += 1;
    let spec;
    try { spec = unpack(JSON.parse(node.textContent)); }
    catch (e) { state.errors.push(id + ": " + e); console.error("qkwh: bad spec " + id, e); return; }
    jobs.push(vegaEmbed(target, spec, Object.assign({}, opts, { downloadFileName: id }))
      .then(function (res) { state.views[id] = res.view; })
      .catch(function (e) { state.errors.push(id + ": " + e); console.error("qkwh: figure " + id, e);
                            target.textContent = "This figure could not be drawn: " + e; }));
  });
  Promise.allSettled(jobs).then(function () { state.ready = true; });
})();
