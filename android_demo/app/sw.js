// Offline shell: the app's own files come from the cache (refreshed in the background);
// API calls always go to the network and are never cached.
const VERSION = "omnidraft-shell-v5";  // v5: settings store only what the user changed
const SHELL = [
  "./", "index.html", "app.css", "manifest.webmanifest",
  "js/app.js", "js/api.js", "js/sse.js", "js/chart.js", "js/settings.js", "js/markdown.js",
  "js/figures.js",
  "vendor/marked/marked.esm.js", "vendor/dompurify/purify.es.js",
  "icons/icon-192.png", "icons/icon-512.png", "icons/maskable-512.png",
];

self.addEventListener("install", (e) => {
  e.waitUntil(caches.open(VERSION).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (e) => {
  e.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k !== VERSION).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  const scope = new URL(self.registration.scope);
  if (e.request.method !== "GET" || url.origin !== scope.origin || !url.pathname.startsWith(scope.pathname)) return;
  // stale-while-revalidate: answer from the cache at once, update it from the network
  e.respondWith(caches.open(VERSION).then(async (cache) => {
    const hit = await cache.match(e.request, { ignoreSearch: true });
    const fresh = fetch(e.request).then((r) => {
      if (r.ok) cache.put(e.request, r.clone());
      return r;
    });
    if (hit) { fresh.catch(() => {}); return hit; }
    return fresh;
  }));
});
