// Hash routes (`#/messages?status=sent`): every page has a link that survives a reload, and the
// worker never sees the route, so static assets need no fallback rules.
import { useEffect, useState } from 'preact/hooks';
import { hashOf } from './ui.js';

export function parseHash(hash) {
  const raw = (hash || '').replace(/^#/, '') || '/';
  const [path, search] = raw.split('?');
  const query = Object.fromEntries(new URLSearchParams(search || ''));
  return { path: path || '/', segments: path.split('/').filter(Boolean).map(decodeURIComponent), query };
}

export function useRoute() {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const changed = () => setRoute(parseHash(location.hash));
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}

export function navigate(path, query) {
  location.hash = hashOf(path, query);
}
