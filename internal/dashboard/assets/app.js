// bullpen dashboard: ages that tick, and live content. The server announces
// on /events the version of what the pages show; when it differs from this
// page's, the page fetches its content again (drawn from the server's
// shared snapshot) and swaps it in. Nothing here builds HTML from data.
(function () {
  'use strict';
  var body = document.body;
  var offset = 0; // server clock minus this browser's, in ms

  function syncClock(serverNow) {
    var t = Date.parse(serverNow);
    if (!isNaN(t)) { offset = t - Date.now(); }
  }

  // The same format as the server's shortDuration.
  function short(ms) {
    var neg = ms < 0 ? '-' : '';
    var s = Math.abs(ms) / 1000;
    if (s < 10) { return neg + s.toFixed(1) + 's'; }
    if (s < 60) { return neg + Math.floor(s) + 's'; }
    var m = Math.floor(s / 60);
    if (m < 60) { return neg + m + 'm' + String(Math.floor(s) % 60).padStart(2, '0') + 's'; }
    var h = Math.floor(m / 60);
    if (h < 24) { return neg + h + 'h' + String(m % 60).padStart(2, '0') + 'm'; }
    return neg + Math.floor(h / 24) + 'd' + (h % 24) + 'h';
  }

  function tick() {
    if (held !== null && !busy()) { swap(held); held = null; }
    var now = Date.now() + offset;
    document.querySelectorAll('[data-since]').forEach(function (el) {
      var t = Date.parse(el.getAttribute('data-since'));
      if (!isNaN(t)) { el.textContent = short(now - t); }
    });
    document.querySelectorAll('[data-until]').forEach(function (el) {
      var t = Date.parse(el.getAttribute('data-until'));
      if (!isNaN(t)) { el.textContent = short(t - now); }
    });
  }

  function status(state, text) {
    var el = document.getElementById('live-status');
    if (el) { el.setAttribute('data-state', state); el.textContent = text; }
  }

  var version = body.getAttribute('data-version');
  var fetching = false;
  var wanted = null;
  var held = null; // content fetched while the reader was busy in #live

  // busy: the reader is selecting text or typing in the content; replacing
  // it would lose the selection or the focus.
  function busy() {
    var live = document.getElementById('live');
    if (!live) { return false; }
    var sel = window.getSelection ? window.getSelection() : null;
    if (sel && !sel.isCollapsed && sel.rangeCount > 0 && live.contains(sel.getRangeAt(0).commonAncestorContainer)) { return true; }
    var active = document.activeElement;
    return active !== null && active !== body && live.contains(active);
  }

  function swap(update) {
    // Server-rendered and escaped by its templates, like the page itself.
    document.getElementById('live').innerHTML = update.html;
    body.setAttribute('data-version', update.version);
    status('live', 'live · ' + new Date(Date.now() + offset).toISOString().substring(11, 19) + ' UTC');
  }

  function refresh(target) {
    if (fetching) { wanted = target; return; }
    fetching = true;
    fetch(location.pathname + location.search, { headers: { 'X-Fragment': '1' }, credentials: 'same-origin', cache: 'no-store' })
      .then(function (r) {
        if (r.status === 401) { location.reload(); throw new Error('signed out'); }
        if (!r.ok) { throw new Error('HTTP ' + r.status); }
        syncClock(r.headers.get('X-Server-Now'));
        version = r.headers.get('X-Content-Version') || target;
        return r.text();
      })
      .then(function (html) {
        // While the reader is busy in the content, the newest one waits
        // for the first tick after they are done.
        held = { html: html, version: version };
        tick();
      })
      .catch(function () { status('lost', 'update failed'); })
      .then(function () {
        fetching = false;
        if (wanted !== null && wanted !== version) { var next = wanted; wanted = null; refresh(next); }
      });
  }

  function listen() {
    if (!window.EventSource) { status('lost', 'no live updates in this browser'); return; }
    var es = new EventSource('/events');
    es.addEventListener('open', function () { status('live', 'live'); });
    es.addEventListener('update', function (e) {
      if (e.data !== version) { refresh(e.data); }
    });
    es.addEventListener('error', function () {
      status('lost', 'reconnecting…');
      if (es.readyState === EventSource.CLOSED) { setTimeout(function () { location.reload(); }, 5000); }
    });
  }

  syncClock(body.getAttribute('data-now'));
  tick();
  setInterval(tick, 1000);
  if (body.getAttribute('data-live') === 'true') { listen(); }
}());
