"""A page as a person sees it: rendered by headless Chromium (Debian's `chromium`).

`check_page` loads a copy of the page with a probe script put first in its <head>: it records
every console.error, uncaught error and failed resource load, and once the page has loaded
writes each image's naturalWidth into the DOM, which `chromium --dump-dom` prints. The original
file is never touched. `screenshot` takes a PNG of the page for a person to look at.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

PROBE = """<script id="simreal-probe">
(function () {
  var errors = [];
  var record = function (text) { errors.push(String(text)); };
  var original = console.error;
  console.error = function () {
    record(Array.prototype.join.call(arguments, ' '));
    return original.apply(console, arguments);
  };
  window.addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) {
      record('failed to load ' + (t.src || t.href).slice(0, 120));
    } else {
      record('uncaught: ' + e.message);
    }
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    record('rejection: ' + e.reason);
  });
  window.addEventListener('load', function () {
    var images = Array.prototype.map.call(document.images, function (img) {
      return {id: img.closest('[id]') ? img.closest('[id]').id : '', alt: img.alt,
              complete: img.complete, width: img.naturalWidth, height: img.naturalHeight};
    });
    var out = document.createElement('pre');
    out.id = 'simreal-probe-result';
    out.textContent = JSON.stringify({errors: errors, images: images});
    document.body.appendChild(out);
  });
})();
</script>"""
RESULT = re.compile(r'<pre id="simreal-probe-result">(.*?)</pre>', re.S)


def chromium():
    """The chromium binary; the test is skipped naming what is missing (a failure in CI)."""
    path = shutil.which('chromium') or shutil.which('chromium-browser')
    if not path:
        pytest.skip('headless Chromium is not installed: apt-get install chromium (Debian); '
                    '.ci/run installs it in CI')
    return path


def _run(args, timeout=300):
    base = [chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
            '--disable-extensions', '--hide-scrollbars', '--mute-audio',
            '--allow-file-access-from-files', '--enable-logging=stderr', '--v=0',
            '--virtual-time-budget=10000']
    env = dict(os.environ, HOME=os.environ.get('HOME', '/tmp'))
    return subprocess.run(base + args, capture_output=True, text=True, timeout=timeout,
                          env=env)


def check_page(html_path, tmp_dir):
    """Render a probed copy of `html_path`; return (dom text, {'errors': [...], 'images':
    [...]}, chromium's stderr). The copy sits beside the original so relative links resolve."""
    html_path = os.path.abspath(html_path)
    with open(html_path) as f:
        page = f.read()
    probed = page.replace('<head>', '<head>' + PROBE, 1) if '<head>' in page \
        else PROBE + page
    copy = os.path.join(os.path.dirname(html_path), '.probe-' + os.path.basename(html_path))
    with open(copy, 'w') as f:
        f.write(probed)
    try:
        result = _run(['--dump-dom', 'file://' + copy])
    finally:
        os.unlink(copy)
    match = RESULT.search(result.stdout)
    if not match:
        raise AssertionError(f'chromium rendered no probe result (exit {result.returncode}); '
                             f'stderr: {result.stderr[-2000:]}')
    import html as html_mod
    probe = json.loads(html_mod.unescape(match.group(1)))
    return result.stdout, probe, result.stderr


def console_errors(stderr):
    """Chromium's own log lines of uncaught page errors (the probe records the rest)."""
    return [line for line in stderr.splitlines() if 'CONSOLE' in line and 'Uncaught' in line]


def screenshot(html_path, png_path, width=1280, height=3000):
    """Take a PNG of the page as headless Chromium renders it; return png_path."""
    result = _run([f'--screenshot={os.path.abspath(png_path)}',
                   f'--window-size={width},{height}', 'file://' + os.path.abspath(html_path)])
    if not os.path.isfile(png_path):
        raise AssertionError(f'chromium took no screenshot (exit {result.returncode}): '
                             f'{result.stderr[-2000:]}')
    return png_path
