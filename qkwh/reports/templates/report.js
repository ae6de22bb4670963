(function () {
  const state = window.qkwhReport = { ready: false, views: {}, errors: [], total: 0 };
  const opts = { renderer: "canvas", actions: { export: true, source: true, compiled: false,
                 editor: false }, downloadFileName: null };
  const jobs = [];
  document.querySelectorAll("script.vl-spec").forEach(function (node) {
    const id = node.dataset.figure;
    const target = document.getElementById("vis-" + id);
    state.total += 1;
    let spec;
    try { spec = JSON.parse(node.textContent); }
    catch (e) { state.errors.push(id + ": " + e); console.error("qkwh: bad spec " + id, e); return; }
    jobs.push(vegaEmbed(target, spec, Object.assign({}, opts, { downloadFileName: id }))
      .then(function (res) { state.views[id] = res.view; })
      .catch(function (e) { state.errors.push(id + ": " + e); console.error("qkwh: figure " + id, e);
                            target.textContent = "This figure could not be drawn: " + e; }));
  });
  Promise.allSettled(jobs).then(function () { state.ready = true; });
})();
