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
        // Server-rendered and escaped by its templates, like the page itself.
        document.getElementById('live').innerHTML = html;
        body.setAttribute('data-version', version);
        tick();
        status('live', 'live · ' + new Date(Date.now() + offset).toISOString().substring(11, 19) + ' UTC');
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
