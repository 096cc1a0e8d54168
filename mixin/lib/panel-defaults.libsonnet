// Per panel type, the fields every panel of that type here shares; a panel adds its own.
{
  stat: {
    fieldConfig: {
      defaults: {
        color: {},
        thresholds: {
          mode: 'absolute',
        },
      },
    },
    options: {
      graphMode: 'none',
      justifyMode: 'auto',
      orientation: 'auto',
      reduceOptions: {
        calcs: ['lastNotNull'],
        fields: '',
        values: false,
      },
      percentChangeColorMode: 'standard',
      showPercentChange: false,
      wideLayout: true,
    },
  },
  'state-timeline': {},
  table: {
    fieldConfig: {
      defaults: {
        custom: {
          align: 'auto',
          cellOptions: {
            type: 'auto',
          },
          inspect: false,
        },
        mappings: [],
        thresholds: {
          mode: 'absolute',
          steps: [
            {
              color: 'green',
              value: null,
            },
          ],
        },
      },
    },
    options: {
      cellHeight: 'sm',
      frameIndex: 0,
      showHeader: true,
    },
  },
  timeseries: {
    fieldConfig: {
      defaults: {
        color: {
          mode: 'palette-classic',
        },
        custom: {
          lineWidth: 1,
          showPoints: 'never',
          spanNulls: false,
          stacking: {
            group: 'A',
          },
          axisSoftMin: 0,
        },
        mappings: [],
        thresholds: {
          mode: 'absolute',
          steps: [
            {
              color: 'green',
              value: null,
            },
          ],
        },
      },
    },
    options: {
      legend: {
        calcs: [],
        displayMode: 'list',
        placement: 'bottom',
        showLegend: true,
      },
      tooltip: {
        mode: 'multi',
        sort: 'desc',
      },
    },
  },
}
