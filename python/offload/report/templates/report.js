// After load: how many images decoded, for the headless-browser test (and a broken page shows).
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.dataset.images = imgs.length;
  document.body.dataset.imagesLoaded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.tables = document.querySelectorAll('table').length;
});
