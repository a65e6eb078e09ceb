// The controls of a table marked `data-explore` (the compare page; see
// `Explore` in document.rs): a text filter over its rows, a tick box per
// column (those marked `data-off` unticked at first), and a tick box per
// row that shows or hides the lines of the same `data-key` in every chart,
// as a click on their legend entry does. The view is kept in the page's
// address (`#hide=2&filter=lr&columns=lr,train.val_acc`) and read from it
// on load, so that a view can be linked to and reopened.
(function () {
  var table = document.querySelector('table[data-explore]');
  if (!table || !table.tHead || !table.tBodies[0]) { return; }
  var each = function (list, f) { Array.prototype.forEach.call(list, f); };
  // The attribute too, so that the page's DOM (a test's dump of it) says
  // what the box shows.
  var tick = function (box, on) {
    box.checked = on;
    box.defaultChecked = on;
  };
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var rows = Array.prototype.slice.call(table.tBodies[0].rows);
  // A column's name: its header's, or the full name of a header shown
  // short (`data-name`).
  var names = heads.map(function (th) { return th.getAttribute('data-name') || th.textContent; });
  var state = { hide: {}, filter: '', off: {} };
  var defaultOff = {};
  heads.forEach(function (th, column) {
    if (column > 0 && th.hasAttribute('data-off')) { defaultOff[names[column]] = true; }
  });
  var copy = function (set) {
    var out = {};
    Object.keys(set).forEach(function (key) { out[key] = true; });
    return out;
  };
  var list = function (text) {
    return text === '' ? [] : text.split(',').map(decodeURIComponent);
  };
  var readAddress = function () {
    state = { hide: {}, filter: '', off: copy(defaultOff) };
    location.hash.replace(/^#/, '').split('&').forEach(function (pair) {
      var at = pair.indexOf('=');
      if (at < 0) { return; }
      var name = pair.slice(0, at);
      var value = pair.slice(at + 1);
      if (name === 'hide') {
        list(value).forEach(function (key) { state.hide[key] = true; });
      } else if (name === 'filter') {
        state.filter = decodeURIComponent(value);
      } else if (name === 'columns') {
        var shown = list(value);
        state.off = {};
        names.forEach(function (column, index) {
          if (index > 0 && shown.indexOf(column) < 0) { state.off[column] = true; }
        });
      }
    });
  };
  var sameSet = function (a, b) {
    return JSON.stringify(Object.keys(a).sort()) === JSON.stringify(Object.keys(b).sort());
  };
  var writeAddress = function () {
    var parts = [];
    var hidden = Object.keys(state.hide);
    if (hidden.length) { parts.push('hide=' + hidden.map(encodeURIComponent).join(',')); }
    if (state.filter) { parts.push('filter=' + encodeURIComponent(state.filter)); }
    if (!sameSet(state.off, defaultOff)) {
      var shown = names.filter(function (column, index) { return index > 0 && !state.off[column]; });
      parts.push('columns=' + shown.map(encodeURIComponent).join(','));
    }
    var hash = parts.length ? '#' + parts.join('&') : '';
    if (hash === location.hash) { return; }
    try {
      history.replaceState(null, '', hash || location.pathname + location.search);
    } catch (refused) {
      // A browser that keeps a file's address as it is: the view is not
      // linkable, and works the same.
    }
  };

  var controls = document.createElement('div');
  controls.className = 'explore';
  var filterLabel = document.createElement('label');
  filterLabel.textContent = 'Filter rows ';
  var filter = document.createElement('input');
  filter.type = 'search';
  filter.className = 'row-filter';
  filter.placeholder = 'run, param or value';
  filterLabel.appendChild(filter);
  controls.appendChild(filterLabel);
  var picker = document.createElement('fieldset');
  picker.className = 'columns';
  var caption = document.createElement('legend');
  caption.textContent = 'Columns';
  picker.appendChild(caption);
  var columnBoxes = [];
  // The columns shown by default are ticked in view; the many others
  // (every metric of every stage) fold under one line, so that the
  // picker does not push the table off the screen.
  var more = document.createElement('details');
  more.className = 'more-columns';
  var moreSummary = document.createElement('summary');
  more.appendChild(moreSummary);
  var moreCount = 0;
  names.forEach(function (column, index) {
    if (index === 0) { return; }
    var label = document.createElement('label');
    var box = document.createElement('input');
    box.type = 'checkbox';
    box.setAttribute('data-column', column);
    box.addEventListener('change', function () {
      if (box.checked) { delete state.off[column]; } else { state.off[column] = true; }
      apply();
    });
    label.appendChild(box);
    label.appendChild(document.createTextNode(' ' + column));
    if (defaultOff[column]) {
      more.appendChild(label);
      moreCount += 1;
    } else {
      picker.appendChild(label);
    }
    columnBoxes.push(box);
  });
  if (moreCount > 0) {
    moreSummary.textContent = moreCount + ' more column' + (moreCount === 1 ? '' : 's');
    picker.appendChild(more);
  }
  controls.appendChild(picker);
  var holder = table.parentNode.classList.contains('scroll') ? table.parentNode : table;
  holder.parentNode.insertBefore(controls, holder);

  var toggle = function (key) {
    if (state.hide[key]) { delete state.hide[key]; } else { state.hide[key] = true; }
    apply();
  };
  var toggleHead = document.createElement('th');
  toggleHead.textContent = 'lines';
  toggleHead.title = "show or hide the row's lines in the charts";
  toggleHead.setAttribute('data-nosort', '');
  table.tHead.rows[0].insertBefore(toggleHead, heads[0]);
  rows.forEach(function (row) {
    var key = row.getAttribute('data-key');
    var cell = document.createElement('td');
    cell.className = 'toggle';
    var box = document.createElement('input');
    box.type = 'checkbox';
    box.title = "show this row's lines in the charts";
    box.setAttribute('data-key', key);
    box.addEventListener('change', function () { toggle(key); });
    cell.appendChild(box);
    row.insertBefore(cell, row.cells[0]);
  });
  each(document.querySelectorAll('figure.plot g.legend-entry[data-key]'), function (entry) {
    entry.addEventListener('click', function () { toggle(entry.getAttribute('data-key')); });
  });
  filter.addEventListener('input', function () {
    state.filter = filter.value;
    apply();
  });

  // What the filter searches in a row, hidden columns included: its name,
  // and each column as `name=value`, as the legends write params
  // (`lr=0.0001`): the value without its change.
  var rowText = function (row) {
    var parts = [];
    each(row.cells, function (cell, index) {
      var value = cell.querySelector('.value') || cell;
      if (index === 1) { parts.push(value.textContent); }
      if (index > 1) { parts.push(names[index - 1] + '=' + value.textContent); }
    });
    return parts.join(' ').toLowerCase();
  };
  var apply = function () {
    var needle = state.filter.toLowerCase();
    var drawn = {};
    rows.forEach(function (row) {
      var key = row.getAttribute('data-key');
      var matches = !needle || rowText(row).indexOf(needle) >= 0;
      row.hidden = !matches;
      row.classList.toggle('off', !!state.hide[key]);
      tick(row.cells[0].firstChild, !state.hide[key]);
      drawn[key] = matches && !state.hide[key];
    });
    each(table.rows, function (row) {
      each(row.cells, function (cell, index) {
        // Cell 0 is the row's switch, 1 its name: always shown.
        if (index > 1) { cell.hidden = !!state.off[names[index - 1]]; }
      });
    });
    columnBoxes.forEach(function (box) { tick(box, !state.off[box.getAttribute('data-column')]); });
    each(document.querySelectorAll('figure.plot g.series[data-key]'), function (line) {
      line.style.display = drawn[line.getAttribute('data-key')] === false ? 'none' : '';
    });
    each(document.querySelectorAll('figure.plot g.legend-entry[data-key]'), function (entry) {
      entry.classList.toggle('off', drawn[entry.getAttribute('data-key')] === false);
    });
    if (filter.value !== state.filter) { filter.value = state.filter; }
    writeAddress();
  };
  window.addEventListener('hashchange', function () {
    readAddress();
    apply();
  });
  readAddress();
  apply();
})();
